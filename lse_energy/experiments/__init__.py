"""Experiments: toy tasks, their data and training loops, and learned networks used by the book.

Modules here may import any model module; no model module imports them.
"""
