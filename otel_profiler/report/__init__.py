"""Renderers of analysis results: console tables, CSV, JSON (and HTML)."""
