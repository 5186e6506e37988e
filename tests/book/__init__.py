"""Structural checks of the book's notebooks (registered, executed, asserting, within the style rules)."""
