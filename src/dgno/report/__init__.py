"""dgno.report"""
