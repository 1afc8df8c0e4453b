"""How much of commtrace's per-op cost a C++ wrapper would remove: a prototype.

Compiles ``cpp_floor/recording_pg.cpp`` with torch's ``load_inline`` (needs a C++
compiler; ~30 s): a ``c10d::ProcessGroup`` subclass that forwards ``allreduce``
to the real group and records call/return/end times, sequence number and an
interned signature (shape, dtype, reduce op, async) into a C++ buffer -- the
wrapper's per-op work with no Python on the path; a second instance also keys
the signature on the caller's Python frames (taking the GIL to read them).
Two gloo ranks; the plain group, this C++ wrapper and commtrace's Python
``TracedProcessGroup`` alternate in blocks (``bench_capture.alternate``) on a
blocking 1-element all_reduce. Not part of ``make bench`` (compile time);
results are quoted in BENCHMARKS.md's analysis.

    OMP_NUM_THREADS=1 python benchmarks/bench_cpp_floor.py [--reps 9] [--calls 400]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_capture import _blocking, _caller_cpu, _opts, alternate, free_port, make_traced  # noqa: E402


def build():
    from torch.utils.cpp_extension import load_inline
    with open(os.path.join(HERE, "cpp_floor", "recording_pg.cpp")) as f:
        return load_inline("commtrace_bench_recording_pg_v2", cpp_sources=[f.read()], extra_cflags=["-O2"])


def _worker(rank, port, calls, reps):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    ext = build()  # cached by the parent's build
    pg = dist.distributed_c10d._get_default_group()
    wrappers = {"C++ prototype": ext.RecPG(pg, False), "C++ + call site": ext.RecPG(pg, True)}
    wrappers["commtrace (Python)"], rec = make_traced(pg, tempfile.mkdtemp(prefix="ct-bench-"), "gloo")
    one, opts = torch.ones(1), _opts(dist.AllreduceOptions, False)
    rows = []
    for label, fn in (("blocking all_reduce 1 elem", _blocking), ("caller CPU", _caller_cpu)):
        for name, w in wrappers.items():
            r = alternate(lambda: fn(lambda: pg.allreduce([one], opts), calls),
                          lambda: fn(lambda: w.allreduce([one], opts), calls), reps)
            rows.append((label, name, r))
    if rank == 0:
        print(f"{'case':28s} {'wrapper':20s} {'plain µs':>9s} {'wrapped µs':>11s} {'added µs':>9s}  spread µs")
        for label, name, r in rows:
            lo, hi = r["added_spread"]
            print(f"{label:28s} {name:20s} {r['plain']:9.2f} {r['traced']:11.2f} {r['added']:+9.2f}  "
                  f"{lo:+.1f}..{hi:+.1f}")
    rec.close()
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--calls", type=int, default=400)
    a = ap.parse_args(argv)
    t = time.time()
    try:
        build()
    except Exception as e:  # no compiler, no headers: nothing to compare
        print(f"[cpp floor] not available: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return 0
    print(f"[cpp floor] built in {time.time() - t:.0f} s", flush=True)
    mp.spawn(_worker, args=(free_port(), a.calls, a.reps), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
