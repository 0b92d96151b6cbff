"""dgno.layers"""
