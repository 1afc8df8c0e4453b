"""Hot-path cost of the ProcessGroup wrapper, plain vs traced, side by side in one run.

Two gloo ranks (torch.multiprocessing.spawn). The same real process group is
called directly (plain) and through a TracedProcessGroup (traced), alternating
in blocks so machine noise hits both alike. Reports medians over blocks and the
spread (min..max of block medians), as differences and ratios.

    python benchmarks/bench_capture.py [--reps 15] [--calls 400] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _traced(pg, run_dir):
    from commtrace.capture.recorder import Recorder
    from commtrace.capture.wrapper import TracedProcessGroup
    rec = Recorder(run_dir, "bench", "none", ["bench"])
    rec.add_world({"world_id": "bench", "rank": pg.rank(), "world_size": pg.size(), "backend": "gloo"})
    gid = rec.add_group({"world": 0, "name": "bench", "backend": "gloo", "size": pg.size(),
                         "rank": pg.rank(), "ranks": list(range(pg.size()))})
    return TracedProcessGroup(pg, rec, gid, list(range(pg.size()))), rec


def _blocking(pg, t, n, opts):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        pg.allreduce([t], opts).wait()
    return (time.perf_counter_ns() - t0) / n


def _issue(pg, t, n, opts):
    """Median time for an async all_reduce call to return (the op is waited after timing)."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        w = pg.allreduce([t], opts)
        samples.append(time.perf_counter_ns() - t0)
        w.wait()
    return statistics.median(samples)


def _worker(rank, port, args, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    plain = dist.distributed_c10d._get_default_group()
    with tempfile.TemporaryDirectory() as d:
        traced, rec = _traced(plain, d)
        results = {}
        sync = dist.AllreduceOptions()
        sync.asyncOp = False
        asyn = dist.AllreduceOptions()
        asyn.asyncOp = True
        cases = {
            "all_reduce 1 elem (blocking)": (lambda pg: _blocking(pg, torch.ones(1), args.calls, sync)),
            "all_reduce 64 KB (blocking)": (lambda pg: _blocking(pg, torch.ones(16384), args.calls // 2, sync)),
            "all_reduce 4 MB (blocking)": (lambda pg: _blocking(pg, torch.ones(1 << 20), max(args.calls // 20, 5), sync)),
            "issue cost: all_reduce 1 elem async_op=True": (lambda pg: _issue(pg, torch.ones(1), args.calls, asyn)),
        }
        for name, fn in cases.items():
            fn(plain), fn(traced)  # warm-up (sig interning, gloo buffers)
            p, tr = [], []
            for _ in range(args.reps):
                p.append(fn(plain))
                tr.append(fn(traced))
            diffs = [b - a for a, b in zip(p, tr)]
            results[name] = {
                "plain_us": statistics.median(p) / 1e3, "traced_us": statistics.median(tr) / 1e3,
                "added_us": statistics.median(diffs) / 1e3,
                "added_spread_us": [min(diffs) / 1e3, max(diffs) / 1e3],
                "ratio": statistics.median(b / a for a, b in zip(p, tr)),
            }
        rec.close()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        mp.spawn(_worker, args=(_free_port(), args, out), nprocs=2)
        with open(out) as f:
            results = json.load(f)
    print(f"{'case':48} {'plain µs':>10} {'traced µs':>10} {'added µs':>10} {'spread µs':>18} {'ratio':>7}")
    for name, r in results.items():
        spread = f"{r['added_spread_us'][0]:.2f}..{r['added_spread_us'][1]:.2f}"
        print(f"{name:48} {r['plain_us']:10.2f} {r['traced_us']:10.2f} {r['added_us']:10.2f} {spread:>18} {r['ratio']:7.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
