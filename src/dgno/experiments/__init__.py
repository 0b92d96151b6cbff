"""dgno.experiments"""
