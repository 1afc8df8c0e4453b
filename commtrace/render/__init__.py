"""Rendering: the terminal report (rich), Perfetto JSON, and CSV/Parquet/JSON exports.

Renderers take analysis results; they compute nothing beyond layout.
"""
