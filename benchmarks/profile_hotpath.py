"""A loop of blocking 1-element gloo all_reduces, plain or traced, for `perf` (benchmarks/analysis.md).

One-rank gloo world (no peer: what remains is the calling thread's own work and
gloo's worker hand-off), the same group called directly or through the
wrapper `commtrace run` installs (native when built) with the real Recorder
and flush thread, optionally with the phase hooks and call-site lookup of
``commtrace.start()`` (mode ``run``). Per-call costs come from two loop
lengths (the difference cancels start-up):

    for n in 20000 120000; do for m in plain traced; do
      perf stat -e instructions:u,cycles:u -x, python benchmarks/profile_hotpath.py $m $n; done; done
    perf record -g python benchmarks/profile_hotpath.py traced 200000; perf report --no-children
"""
from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_capture  # noqa: E402


def main(mode: str, n: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(bench_capture.free_port()))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=0, world_size=1)
    pg = dist.distributed_c10d._get_default_group()
    d = tempfile.mkdtemp(prefix="ct-prof-")
    rec = None
    if mode == "traced":
        pg, rec = bench_capture.make_traced(pg, d, "gloo")
    elif mode == "run":
        import commtrace
        commtrace.start(out_dir=d)
        pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceOptions()
    t = torch.ones(1)
    for _ in range(n):
        pg.allreduce([t], opts).wait()
    if rec is not None:
        rec.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
