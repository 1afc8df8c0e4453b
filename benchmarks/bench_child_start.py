"""What tracing costs a Python process that starts under ``commtrace run``.

    python benchmarks/bench_child_start.py [--reps 30] [--baseline-tree DIR] [--json FILE]

Every Python child of a traced run (an mp.spawn rank, a DataLoader worker
started with "spawn", any subprocess running Python) starts tracing from the
boot ``sitecustomize``: it imports commtrace's activation code and writes its
start record (one file, one line). Measured side by side, interleaved, on this
machine: ``python -c pass`` untraced; the same with this tree's tracing on;
and, with ``--baseline-tree``, the same with another commtrace checkout's
tracing (e.g. ``git archive <commit>`` of an earlier tree). Bytecode is cached
(in a private prefix) as for an installed package. Reported: median
wall time per process start (min..max over repetitions) and the ratios to
the untraced start.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(tree: str | None, run_dir: str, pycache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMTRACE_")}
    env.pop("PYTHONPATH", None)
    # Compiled once, as in an installed package (not into the source tree).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(tree, "commtrace", "capture", "_boot"), tree])
        env["COMMTRACE_DIR"] = run_dir
    return env


def _start_ns(env: dict) -> int:
    t = time.perf_counter_ns()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter_ns() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--baseline-tree", metavar="DIR", help="another commtrace checkout to compare with")
    ap.add_argument("--json", metavar="FILE")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pyc = os.path.join(tmp, "pycache")
        cases = {"untraced": _env(None, tmp, pyc), "traced": _env(ROOT, os.path.join(tmp, "run"), pyc)}
        if ns.baseline_tree:
            cases["traced (baseline tree)"] = _env(os.path.abspath(ns.baseline_tree), os.path.join(tmp, "base"), pyc)
        times: dict[str, list[int]] = {k: [] for k in cases}
        for k, env in cases.items():  # warm the page cache
            _start_ns(env)
        for _ in range(ns.reps):  # interleaved: drift of the machine hits every case alike
            for k, env in cases.items():
                times[k].append(_start_ns(env))
    base = statistics.median(times["untraced"])
    out = {}
    for k, ts in times.items():
        med = statistics.median(ts)
        out[k] = {"median_ms": med / 1e6, "min_ms": min(ts) / 1e6, "max_ms": max(ts) / 1e6, "ratio": med / base}
        print(f"{k:<24} {med / 1e6:7.1f} ms  ({min(ts) / 1e6:.1f}..{max(ts) / 1e6:.1f})  "
              f"x{med / base:.2f} of untraced")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
