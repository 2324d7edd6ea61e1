"""pipelines"""
