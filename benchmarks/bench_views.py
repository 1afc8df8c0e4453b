"""The partitioned report's timeline and streamed ``--events``, side by side.

    python benchmarks/bench_views.py [--ranks 64] [--ops 100000] [--rounds 3] [--json FILE]

One synthetic run (tests/synthetic.py); every measurement in a fresh subprocess:

* **timeline**: ``analysis.partitioned.analyse`` in a process pool of 2 without and with the
  terminal timeline (``timeline_width``: one more map, one task per rank), alternately,
  ``rounds`` times: wall and CPU (user + sys of the analysing process and its workers),
  medians, and the timeline's share.
* **events**: ``commtrace report RUN --events`` (output to /dev/null), one frame and
  ``--partitioned --memory-limit 256M`` (the streaming merge of events_merge: one chunk
  per file, the chunks together a quarter of the limit), alternately, ``rounds`` times:
  wall, events per second, and the peak RSS of the report process over its post-import
  base per op of the run (VmHWM; the merge runs in that process).
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

HERE = os.path.dirname(os.path.abspath(__file__))
EVENTS_LIMIT = "256M"       # the partitioned --events: chunks of a quarter of this over the files

ANALYSE = r"""
import json, resource, sys, time
run_dir, width = sys.argv[1], int(sys.argv[2])
from commtrace.analysis.partitioned import analyse
from commtrace.analysis import native_ext
native_ext.kernels()


def cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


cpu0, t = cpu_s(), time.perf_counter()
s = analyse(run_dir, workers=2, progress=False, timeline_width=width or None)
print(json.dumps({"ops": s.ops, "wall_s": time.perf_counter() - t, "cpu_s": cpu_s() - cpu0,
                  "timeline_s": s.seconds.get("timeline", 0.0)}))
"""

REPORT = r"""
import contextlib, json, os, sys, time
sys.path.insert(0, sys.argv[1])
from peak_rss import peak_rss_kib
from commtrace.cli import main
import commtrace.analysis.partitioned, commtrace.analysis.partitioned.events_merge, commtrace.render.perfetto  # noqa
import commtrace.analysis.report, commtrace.render.terminal  # noqa: F401
base = peak_rss_kib()
t = time.perf_counter()
with open(os.devnull, "w") as out, contextlib.redirect_stdout(out):
    rc = main(sys.argv[2:])
print(json.dumps({"rc": rc, "wall_s": time.perf_counter() - t, "rss": (peak_rss_kib() - base) * 1024}))
"""


def _child(script: str, *args: str) -> dict:
    p = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=3600)
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def run(ranks: int, ops: int, rounds: int = 3) -> dict:
    from synthetic import write_synthetic_run
    work = tempfile.mkdtemp(prefix="bench_views_")
    try:
        run_dir = write_synthetic_run(os.path.join(work, "run"), ranks=ranks, ops_per_rank=ops, seed=4, p2p=True)
        res: dict = {"ranks": ranks, "ops_per_rank": ops, "ops": ranks * ops, "rounds": rounds,
                     "timeline": {"without": [], "with": []}, "events": {"one-frame": [], "partitioned": []}}
        for _ in range(rounds):          # alternately: the machine's load hits both alike
            for case, width in (("without", "0"), ("with", "160")):
                res["timeline"][case].append(_child(ANALYSE, run_dir, width))
            for mode, flags in (("one-frame", []), ("partitioned", ["--partitioned", "--memory-limit", EVENTS_LIMIT])):
                r = _child(REPORT, HERE, "report", run_dir, "--events", "--width", "160", *flags)
                if r["rc"] not in (0, 1):
                    raise RuntimeError(f"report --events exited {r['rc']}")
                res["events"][mode].append(r)
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _med(rows: list, key: str) -> float:
    return statistics.median(r[key] for r in rows)


def markdown(res: dict) -> str:
    tl, ev, n = res["timeline"], res["events"], res["ops"]
    w0, w1 = _med(tl["without"], "wall_s"), _med(tl["with"], "wall_s")
    c0, c1 = _med(tl["without"], "cpu_s"), _med(tl["with"], "cpu_s")
    lines = [f"One synthetic run, {res['ranks']} ranks x {res['ops_per_rank']:,} ops ({n:,} ops), each case in a "
             f"fresh process, alternately, {res['rounds']} round(s), medians.\n",
             "Terminal timeline (`analyse(..., timeline_width=160)`: one more map, one task per rank), process "
             "pool x2:\n",
             "| | wall | CPU (analysing process + workers) | throughput |", "|---|---|---|---|",
             f"| without the timeline | {w0:.2f} s | {c0:.2f} s | {n / w0 / 1e6:.2f} M ops/s |",
             f"| with the timeline | {w1:.2f} s | {c1:.2f} s | {n / w1 / 1e6:.2f} M ops/s |",
             f"| ratio | {w1 / w0:.2f}x | {c1 / c0:.2f}x | |",
             f"\nThe timeline stage alone: {_med(tl['with'], 'timeline_s'):.2f} s wall.\n",
             "`report --events` (every op, output to /dev/null): one frame vs the partitioned report's streaming "
             f"merge (`--partitioned --memory-limit {EVENTS_LIMIT}`):\n",
             "| | wall | events/s | peak RSS of the report process |", "|---|---|---|---|"]
    for mode in ("one-frame", "partitioned"):
        w = _med(ev[mode], "wall_s")
        lines.append(f"| {mode} | {w:.2f} s | {n / w / 1e6:.2f} M/s | {max(r['rss'] for r in ev[mode]) / n:.0f} B/op |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run(a.ranks, a.ops, a.rounds)
    print(markdown(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
