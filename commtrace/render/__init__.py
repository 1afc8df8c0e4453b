"""Rendering of analysis results (terminal, HTML, Perfetto JSON, CSV/Parquet/JSON); layout only."""
