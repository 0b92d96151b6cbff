"""dgno.inference"""
