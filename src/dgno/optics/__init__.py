"""dgno.optics"""
