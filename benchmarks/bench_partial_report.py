"""The partitioned report's exports and windows side by side with the one-frame report.

    python benchmarks/bench_partial_report.py [--ranks 16] [--ops 100000] [--json FILE]

One synthetic run (tests/synthetic.py); each case is ``commtrace report`` in a fresh
subprocess, one frame and ``--partitioned`` (process pool of 2) alternately, ``reps`` times:
``-q --csv`` (one row per op per rank: the partitioned report writes it rank by rank) and a
window (``--skip-steps 2 --phase backward``). Wall time (median) and the peak RSS of the
report process over its post-import base (VmHWM; pool workers not included: they hold one
rank's ops, bounded by --memory-limit), per op of the run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

CHILD = r"""
import contextlib, io, json, sys, time
sys.path.insert(0, sys.argv[1])
from peak_rss import peak_rss_kib
from commtrace.cli import main
import commtrace.analysis.partitioned, commtrace.render.perfetto, commtrace.render.export  # noqa: F401
import commtrace.analysis.report, commtrace.render.terminal  # noqa: F401
base = peak_rss_kib()
t = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(sys.argv[2:])
print(json.dumps({"rc": rc, "wall_s": time.perf_counter() - t, "rss": (peak_rss_kib() - base) * 1024}))
"""

CASES = {
    "csv": ["-q", "--csv", "{out}/ops.csv"],
    "window": ["--skip-steps", "2", "--phase", "backward", "--width", "120"],
}


def _child(args: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(os.path.abspath(__file__)), *args],
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if out["rc"] not in (0, 1):
        raise RuntimeError(f"report exited {out['rc']}: {p.stderr[-2000:]}")
    return out


def run(ranks: int, ops: int, reps: int = 3) -> dict:
    from synthetic import write_synthetic_run
    work = tempfile.mkdtemp(prefix="bench_partial_report_")
    try:
        run_dir = write_synthetic_run(os.path.join(work, "run"), ranks=ranks, ops_per_rank=ops, seed=11, p2p=True)
        total = ranks * ops
        res = {"ranks": ranks, "ops_per_rank": ops, "ops": total, "cases": {}}
        for case, extra in CASES.items():
            times = {"one-frame": [], "partitioned": []}
            rss = {"one-frame": [], "partitioned": []}
            for _ in range(reps):   # alternately: the machine's load hits both alike
                for mode, flags in (("one-frame", []), ("partitioned", ["--partitioned"])):
                    args = ["report", run_dir, *flags, *[a.format(out=work) for a in extra]]
                    r = _child(args)
                    times[mode].append(r["wall_s"])
                    rss[mode].append(r["rss"])
            res["cases"][case] = {m: {"wall_s": statistics.median(times[m]), "bytes_per_op": max(rss[m]) / total}
                                  for m in times}
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def markdown(res: dict) -> str:
    lines = [f"One synthetic run, {res['ranks']} ranks x {res['ops_per_rank']:,} ops ({res['ops']:,} ops); "
             "`commtrace report` in fresh processes, one frame and `--partitioned` (2 workers) alternately; "
             "median wall time; peak RSS of the report process over its post-import base.\n",
             "| case | one frame | partitioned | time ratio (partitioned / one frame) | peak, one frame | "
             "peak, partitioned |", "|---|---|---|---|---|---|"]
    names = {"csv": "`-q --csv` (partitioned: rank by rank)", "window": "`--skip-steps 2 --phase backward`"}
    for case, r in res["cases"].items():
        a, b = r["one-frame"], r["partitioned"]
        lines.append(f"| {names.get(case, case)} | {a['wall_s']:.2f} s | {b['wall_s']:.2f} s | "
                     f"{b['wall_s'] / a['wall_s']:.2f}x | {a['bytes_per_op']:.0f} B/op | {b['bytes_per_op']:.0f} B/op |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run(a.ranks, a.ops, a.reps)
    print(markdown(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
