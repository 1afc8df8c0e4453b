"""Smoke test of benchmarks/bench_clock.py: its smallest case runs end to end and
returns what its table needs (no timing assertions)."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_bench_clock_smallest_case(suite_ports):
    import bench_clock
    [res] = bench_clock.run(ranks=(2,), reps=1)
    assert res["ranks"] == 2 and res["ok"] is True
    for k in ("init", "join", "start", "end", "ratio_start_to_init"):
        assert set(res[k]) == {"median", "min", "max"} and res[k]["median"] > 0
    assert bench_clock.table([res]).splitlines()[2].startswith("| 2 |")
