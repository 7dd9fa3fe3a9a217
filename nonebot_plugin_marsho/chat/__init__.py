"""chat"""
