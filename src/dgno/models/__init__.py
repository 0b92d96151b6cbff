"""dgno.models"""
