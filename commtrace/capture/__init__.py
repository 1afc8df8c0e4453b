"""Capture: the ProcessGroup wrapper and the launcher glue. Knows nothing about reports."""
