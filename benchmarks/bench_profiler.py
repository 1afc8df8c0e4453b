"""commtrace vs torch.profiler(record_shapes=True), side by side in one run.

Two gloo ranks (torch.multiprocessing.spawn). Three modes over the same real
process group, alternating in blocks (rotating which goes first):
  plain     the group called directly
  profiler  the group called directly inside torch.profiler.profile(
            activities=[CPU], record_shapes=True) (entered/left outside timing)
  traced    the group called through the traced wrapper (native when built; real Recorder)
Figures: the issue cost (time for all_reduce(1 elem, async_op=True) to return)
and the blocking 1-element all_reduce latency; median over blocks of the
paired difference vs plain, with the spread. The DDP step-time overhead and the
profiler's trace size per collective come from ``bench_ddp.py --profiler``
(same models, same side-by-side blocks).

    python benchmarks/bench_profiler.py [--reps 15] [--calls 400] [--json out.json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_capture  # noqa: E402

MODES = ("plain", "profiler", "traced")
CASES = ("issue cost: all_reduce 1 elem async", "all_reduce 1 elem")


def _prof():
    from torch.profiler import ProfilerActivity, profile
    return profile(activities=[ProfilerActivity.CPU], record_shapes=True)


def _worker(rank, port, calls, reps, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    plain = dist.distributed_c10d._get_default_group()
    d = tempfile.mkdtemp(prefix="ct-prof-")
    results = {}
    try:
        traced, rec = bench_capture.make_traced(plain, d, "gloo")
        fns = bench_capture.case_fns(calls, CASES)
        groups = {"plain": plain, "profiler": plain, "traced": traced}
        for name, fn in fns.items():
            for m in MODES:  # warm-up
                with (_prof() if m == "profiler" else contextlib.nullcontext()):
                    fn(groups[m])
            times = {m: [] for m in MODES}
            for i in range(reps):
                order = MODES[i % 3:] + MODES[:i % 3]
                for m in order:
                    with (_prof() if m == "profiler" else contextlib.nullcontext()):
                        times[m].append(fn(groups[m]))
            results[name] = {m: bench_capture.paired(times["plain"], times[m]) for m in ("profiler", "traced")}
        rec.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def run(calls: int = 400, reps: int = 15) -> dict:
    """{case: {"profiler": paired summary vs plain (µs), "traced": ...}}."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        mp.spawn(_worker, args=(bench_capture.free_port(), calls, reps, path), nprocs=2)
        with open(path) as f:
            return json.load(f)


def print_table(res: dict) -> None:
    print(f"{'case':40} {'plain µs':>9} {'+profiler µs':>13} {'spread':>14} {'+commtrace µs':>14} {'spread':>14}")
    for name, r in res.items():
        p, t = r["profiler"], r["traced"]
        print(f"{name:40} {p['plain']:9.2f} {p['added']:13.2f} {p['added_spread'][0]:6.2f}..{p['added_spread'][1]:<6.2f} "
              f"{t['added']:14.2f} {t['added_spread'][0]:6.2f}..{t['added_spread'][1]:<6.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = run(args.calls, args.reps)
    print_table(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
