"""What the launcher-variable watch (capture/envreads.py) costs an ``os.environ`` lookup.

    python benchmarks/bench_envreads.py [--reps 15] [--lookups 200000]

While a variable ``commtrace run`` set is still unread, every ``os.environ``
lookup of the process goes through one more Python call and a set lookup.
Measured side by side, in alternating rounds: ``os.environ.get("PATH")`` and
``"HOME" in os.environ`` with the watch off and on (watching a variable nobody
reads, so it stays on). Reported: median ns per lookup of each and their ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from commtrace.capture.envreads import EnvReads  # noqa: E402


def _per_lookup(n: int) -> float:
    get, env = os.environ.get, os.environ
    t = time.perf_counter_ns()
    for _ in range(n):
        get("PATH")
        "HOME" in env  # noqa: B015 -- the lookup is what is measured
    return (time.perf_counter_ns() - t) / (2 * n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--lookups", type=int, default=200000)
    ns = ap.parse_args()
    os.environ["COMMTRACE_BENCH_UNREAD"] = "1"
    off, on = [], []
    for _ in range(ns.reps):
        off.append(_per_lookup(ns.lookups))
        watch = EnvReads(["COMMTRACE_BENCH_UNREAD"]).start()
        on.append(_per_lookup(ns.lookups))
        watch.stop()
    a, b = statistics.median(off), statistics.median(on)
    print(f"os.environ lookup: {a:.0f} ns untouched, {b:.0f} ns watched (median of {ns.reps}); ratio {b / a:.2f}")


if __name__ == "__main__":
    main()
