"""dgno.data"""
