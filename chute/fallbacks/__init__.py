"""fallbacks"""
