"""BENCHMARKS.md is written by benchmarks/run_all.py: its measured tables, then the hand-written
benchmarks/analysis.md. A section added to BENCHMARKS.md by hand alone would be lost by the next
`make bench`, so the hand-written part of the two must be the same text."""
from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIRST_HAND_WRITTEN = "## Where each goal stands"


def test_benchmarks_md_ends_with_analysis_md():
    with open(os.path.join(ROOT, "BENCHMARKS.md")) as f:
        doc = f.read()
    with open(os.path.join(ROOT, "benchmarks", "analysis.md")) as f:
        analysis = f.read()
    assert analysis.startswith(FIRST_HAND_WRITTEN)
    at = doc.find("\n" + FIRST_HAND_WRITTEN)
    assert at >= 0, f"BENCHMARKS.md has no '{FIRST_HAND_WRITTEN}' section"
    tail = doc[at + 1:]
    assert tail.rstrip("\n") == analysis.rstrip("\n"), (
        "the hand-written part of BENCHMARKS.md differs from benchmarks/analysis.md: edit analysis.md "
        "and copy it to BENCHMARKS.md's end (make bench writes BENCHMARKS.md from it)")
