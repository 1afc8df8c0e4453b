"""Trace size on disk and peak memory added per rank, for a run of N (default 1 M) small ops.

Each measurement runs in a fresh subprocess (a one-rank gloo world) that issues
N blocking 1-element all_reduce calls, either directly (plain) or through a
traced wrapper (native when built) with the real Recorder and its flush thread (traced). The
subprocess reports its RSS high-water mark (``VmHWM``, benchmarks/peak_rss.py);
the figure is traced - plain (whole-process, so it includes
everything tracing allocates: rows buffered between flushes, the pending and
polling lists, the writer's buffers). Trace bytes are the sizes of the files
the Recorder wrote (ops.bin + meta.jsonl) after ``close()``.

    python benchmarks/bench_tracesize.py [--ops 1000000] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

WARMUP = 100
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _child(mode: str, n: int) -> dict:
    import torch
    import torch.distributed as dist

    from commtrace import torch_compat
    sys.path.insert(0, HERE)
    import bench_capture
    from peak_rss import peak_rss_kib
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=0, world_size=1)   # on the parent's MASTER_ADDR/MASTER_PORT
    pg = dist.distributed_c10d._get_default_group()
    t = torch.ones(1)
    o = torch_compat.make_options(dist.AllreduceOptions, async_op=False)
    d = tempfile.mkdtemp(prefix="ct-size-")
    rec = None
    try:
        if mode == "traced":
            pg, rec = bench_capture.make_traced(pg, d, "gloo")
        for _ in range(WARMUP):  # warm-up (also interns the sig); traced too, so counted in "ops"
            pg.allreduce([t], o).wait()
        rss0 = peak_rss_kib() * 1024
        t0 = time.perf_counter()
        for _ in range(n):
            pg.allreduce([t], o).wait()
        elapsed = time.perf_counter() - t0
        if rec is not None:
            rec.close()
        rss = peak_rss_kib() * 1024
        sizes = {"ops_bin": 0, "meta_jsonl": 0}
        for f in os.listdir(d):
            key = "ops_bin" if f.endswith(".ops.bin") else "meta_jsonl" if f.endswith(".meta.jsonl") else None
            if key:
                sizes[key] += os.path.getsize(os.path.join(d, f))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    dist.destroy_process_group()
    return {"mode": mode, "ops": n + WARMUP, "maxrss": rss, "maxrss_before": rss0, "seconds": elapsed, **sizes}


def _spawn(mode: str, n: int, timeout: float) -> dict:
    import bench_capture   # its free_port, asked here: the test suite gives it the suite's ports
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(bench_capture.free_port())}
    env.pop("COMMTRACE_DIR", None)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, "--ops", str(n)],
                       env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"bench_tracesize child {mode} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run(ops: int = 1_000_000, timeout: float = 600) -> dict:
    plain = _spawn("plain", ops, timeout)
    traced = _spawn("traced", ops, timeout)
    added = traced["maxrss"] - plain["maxrss"]
    ops = traced["ops"]  # includes the warm-up calls, which are in the trace too
    total = traced["ops_bin"] + traced["meta_jsonl"]
    return {
        "ops": ops,
        "ops_bin": traced["ops_bin"], "meta_jsonl": traced["meta_jsonl"],
        "records": traced["ops_bin"] // 32,
        "bytes_per_op": total / ops, "ops_bin_bytes_per_op": traced["ops_bin"] / ops,
        "maxrss_plain": plain["maxrss"], "maxrss_traced": traced["maxrss"],
        "peak_added_bytes": added, "peak_added_bytes_per_op": added / ops,
        "ops_per_s_plain": ops / plain["seconds"], "ops_per_s_traced": ops / traced["seconds"],
    }


def print_table(r: dict) -> None:
    print(f"{r['ops']} ops: ops.bin {r['ops_bin']} B + meta.jsonl {r['meta_jsonl']} B = "
          f"{r['bytes_per_op']:.2f} B/op ({r['records']} records)")
    print(f"peak RSS plain {r['maxrss_plain'] / 2**20:.1f} MiB, traced {r['maxrss_traced'] / 2**20:.1f} MiB: "
          f"added {r['peak_added_bytes'] / 2**20:.2f} MiB = {r['peak_added_bytes_per_op']:.2f} B/op")
    print(f"throughput plain {r['ops_per_s_plain']:.0f} ops/s, traced {r['ops_per_s_traced']:.0f} ops/s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--json")
    ap.add_argument("--child", choices=["plain", "traced"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.ops)))
        return 0
    r = run(args.ops)
    print_table(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
