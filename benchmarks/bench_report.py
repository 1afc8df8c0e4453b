"""Benchmark `commtrace report`: analysis throughput and peak memory, Perfetto export.

    python benchmarks/bench_report.py [--ranks 64] [--ops 100000] [--perfetto-ops 1000000] [--dir DIR]

The synthetic run is DDP-like: per step 4 gradient buckets, an all_gather and
3 compute spans (forward, backward, optimizer), every 10 steps a barrier.
Each measurement runs in a fresh subprocess (clean peak-memory numbers): the peak
RSS growth over the process's baseline after imports (VmHWM, benchmarks/peak_rss.py) and the
tracemalloc peak (Python + numpy allocations), both divided by the op count -- of the analysing
process only: a run of 1 M ops or more is analysed in a process pool whose workers are not counted
here (bench_scale.py counts the largest one). The analysis reads the files itself: "load" is 0.
Prints a Markdown table and writes JSON with --json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

CHILD = r"""
import json, os, resource, sys, time, tracemalloc
import numpy as np, pandas as pd
import commtrace.analysis.report, commtrace.render.perfetto, commtrace.trace.reader
from commtrace.analysis.run_info import load_report_run
from commtrace.analysis.partitioned import analyse
mode, run_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
trace = os.environ.get("BENCH_TRACEMALLOC") == "1"
sys.path.insert(0, os.environ["BENCH_DIR"])
from peak_rss import peak_rss_kib as rss_kib
base = rss_kib()
if trace:
    tracemalloc.start()
res = {}
t0 = time.perf_counter(); c0 = time.process_time()
if mode == "analysis":      # the report's analysis reads the files itself (no frame is loaded first)
    rep = analyse(run_dir, progress=False)
    t2 = time.perf_counter()
    res.update(load_s=0.0, load_cpu_s=0.0, peak_rss_after_load_bytes=0, frame_bytes=0, ops=rep.ops,
               analysis_s=t2 - t0, analysis_cpu_s=time.process_time() - c0, workers=rep.workers)
    if trace:
        res["tracemalloc_peak_load_bytes"] = 0
else:
    run = load_report_run(run_dir)
    res["ops"] = len(run.frame)
    from commtrace.render.perfetto import write_perfetto
    t1 = time.perf_counter(); c1 = time.process_time()
    counts = write_perfetto(run.frame, out, None, None, run.processes, spans=run.spans, marks=run.marks)
    t2 = time.perf_counter()
    res["perfetto_cpu_s"] = time.process_time() - c1
    res.update(load_s=t1 - t0, perfetto_s=t2 - t1, perfetto_bytes=os.path.getsize(out), **counts)
res["peak_rss_delta_bytes"] = (rss_kib() - base) * 1024
if trace:
    res["tracemalloc_peak_bytes"] = tracemalloc.get_traced_memory()[1]
print(json.dumps(res))
"""


def child(mode: str, run_dir: str, out: str, tracemalloc: bool = False) -> dict:
    env = dict(os.environ, BENCH_TRACEMALLOC="1" if tracemalloc else "0",
               BENCH_DIR=os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-c", CHILD, mode, run_dir, out], capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--ops", type=int, default=100_000, help="ops per rank")
    ap.add_argument("--perfetto-ops", type=int, default=1_000_000)
    ap.add_argument("--dir", help="keep the synthetic runs here (default: a temp dir)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    from synthetic import write_synthetic_run
    root = a.dir or tempfile.mkdtemp(prefix="commtrace-bench-")
    big = os.path.join(root, f"r{a.ranks}x{a.ops}")
    t = time.perf_counter()
    if not os.path.isdir(big):
        write_synthetic_run(big, ranks=a.ranks, ops_per_rank=a.ops, seed=0)
    gen_s = time.perf_counter() - t
    pr = 10
    small = os.path.join(root, f"r{pr}x{a.perfetto_ops // pr}")
    if not os.path.isdir(small):
        write_synthetic_run(small, ranks=pr, ops_per_rank=a.perfetto_ops // pr, seed=1)
    res = {"ranks": a.ranks, "ops_per_rank": a.ops, "generate_s": gen_s, "cpus": os.cpu_count()}
    runs = [child("analysis", big, "") for _ in range(a.repeat)]
    best = min(runs, key=lambda r: r["load_s"] + r["analysis_s"])
    res.update({k: best[k] for k in ("ops", "load_s", "analysis_s", "load_cpu_s", "analysis_cpu_s", "peak_rss_delta_bytes", "peak_rss_after_load_bytes", "frame_bytes")})
    res["ops_per_s"] = best["ops"] / (best["load_s"] + best["analysis_s"])
    res["analysis_ops_per_s"] = best["ops"] / best["analysis_s"]
    res["rss_bytes_per_op"] = best["peak_rss_delta_bytes"] / best["ops"]
    tm = child("analysis", big, "", tracemalloc=True)
    res["tracemalloc_bytes_per_op"] = tm["tracemalloc_peak_bytes"] / tm["ops"]
    res["tracemalloc_load_bytes_per_op"] = tm["tracemalloc_peak_load_bytes"] / tm["ops"]
    out = os.path.join(root, "trace.json")
    pf = child("perfetto", small, out)
    res.update({"perfetto_ops": pf["ops"], "perfetto_s": pf["perfetto_s"], "perfetto_cpu_s": pf["perfetto_cpu_s"], "perfetto_flows": pf["flows"],
                "perfetto_mb": pf["perfetto_bytes"] / 1e6})
    os.remove(out)
    print("| metric | value |\n|---|---|")
    print(f"| ops (ranks x ops/rank) | {res['ops']:,} ({a.ranks} x {a.ops:,}) |")
    print(f"| load (reader.load_run + run-id check), wall / CPU | {res['load_s']:.2f} s / {res['load_cpu_s']:.2f} s |")
    print(f"| analysis (steps, exposed time, match, summaries, skew), wall / CPU | {res['analysis_s']:.2f} s / {res['analysis_cpu_s']:.2f} s ({res['analysis_ops_per_s'] / 1e6:.2f} M ops/s wall) |")
    print(f"| load + analysis, wall / CPU | {res['load_s'] + res['analysis_s']:.2f} s = {res['ops_per_s'] / 1e6:.2f} M ops/s / "
          f"{res['load_cpu_s'] + res['analysis_cpu_s']:.2f} s = {res['ops'] / (res['load_cpu_s'] + res['analysis_cpu_s']) / 1e6:.2f} M ops/s |")
    print(f"| peak RSS growth | {res['peak_rss_delta_bytes'] / 2**20:.0f} MiB = {res['rss_bytes_per_op']:.0f} B/op |")
    print(f"| peak RSS growth during load only | {res['peak_rss_after_load_bytes'] / res['ops']:.0f} B/op |")
    print(f"| the loaded frame itself | {res['frame_bytes'] / res['ops']:.0f} B/op |")
    print(f"| tracemalloc peak: load / load + analysis | {res['tracemalloc_load_bytes_per_op']:.0f} / {res['tracemalloc_bytes_per_op']:.0f} B/op |")
    print(f"| Perfetto export | {res['perfetto_ops']:,} ops + {res['perfetto_flows']:,} flows in {res['perfetto_s']:.2f} s wall / {res['perfetto_cpu_s']:.2f} s CPU ({res['perfetto_mb']:.0f} MB) |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
