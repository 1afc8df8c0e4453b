"""Smoke test of benchmarks/bench_partial_report.py: its smallest case runs end to end and
gives the rows BENCHMARKS.md shows (no timing assertions: this machine is shared)."""
from __future__ import annotations

import importlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_partial_report_bench():
    b = importlib.import_module("bench_partial_report")
    res = b.run(ranks=2, ops=300, reps=1)
    assert res["ops"] == 600 and set(res["cases"]) == {"csv", "window"}
    for case in res["cases"].values():
        for mode in ("one-frame", "partitioned"):
            assert case[mode]["wall_s"] > 0 and case[mode]["bytes_per_op"] >= 0
    md = b.markdown(res)
    assert md.count("\n| `") == 2 and "time ratio" in md
