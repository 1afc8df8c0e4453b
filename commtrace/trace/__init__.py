"""Trace files: the schema, the writer, and the reader (``load``)."""
