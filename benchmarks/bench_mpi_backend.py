"""mpi backend vs raw mpi4py (all_reduce) and vs gloo (DDP step), in one run.

    OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
      .venv/bin/mpirun --oversubscribe -n 2 .venv/bin/python benchmarks/bench_mpi_backend.py

(Without OMP_NUM_THREADS=1, torch's OpenMP threads spin between ops and a 4 MB
all_reduce takes ~5x longer, raw and backend alike.)

Untraced. Every figure is the median over repetitions of the mean time of a
batch of calls; the variants are interleaved repetition by repetition so that
machine noise hits them alike. Rank 0 prints the table and the ratios.
  raw        comm.Allreduce(MPI.IN_PLACE, ndarray, MPI.SUM)
  raw t mem  the same on the tensor's own memory (t.numpy())
  pg         pg.allreduce([t], opts) with opts.asyncOp=False, then .wait()
             (exactly what dist.all_reduce hands the backend), on the group
             init_process_group/new_group return: the C++ fast path
             (NativeMPIProcessGroup) when its extension is built, else Python
  pg alt     pg, alternating between two tensors: both paths reuse the
             finished Work of a repeated call on the same small tensor, this
             shows the cost without that reuse (per call; at 4 MB it also
             doubles the memory touched, so there it is not about the Work)
  pg py      the same as pg on the Python MPIProcessGroup (pg.inner when pg
             is native)
  dist       dist.all_reduce(t, group=pg): adds torch's Python front end
  dist py    the same on a second group created with COMMTRACE_NATIVE=0
  dist async dist.all_reduce(t, group=pg, async_op=True).wait()
  bcast      pg.broadcast([t], opts) (blocking, root 0) then .wait(): the fast path's other op
  bcast py   the same on the Python group (its general path: _go, _collective)
  DDP step   forward+backward+SGD step, DDP(bucket_cap_mb=1), mpi (pg, and
             the Python path: dist py's group) vs gloo

The first line says which path ``pg`` took (commtrace.mpi.fastpath_status()).
Build the fast path first with ``commtrace build-native``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from commtrace import torch_compat
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import commtrace.mpi
from commtrace import mpienv
from commtrace.capture.launch import free_port


def timed(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def interleaved(variants, n, reps, barrier, calls_per_fn=None):
    """Median per-call time of each variant; ``calls_per_fn[k]``: how many
    calls one invocation of variant k makes (default 1)."""
    calls_per_fn = calls_per_fn or {}
    res = {k: [] for k in variants}
    for _ in range(reps):
        for k, fn in variants.items():
            barrier()
            res[k].append(timed(fn, n) / calls_per_fn.get(k, 1))
    return {k: statistics.median(v) for k, v in res.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--hidden", type=int, default=2000)
    ap.add_argument("--ddp-steps", type=int, default=10)
    ap.add_argument("--calls", type=int, default=20000,
                    help="1-element all_reduces per repetition and variant (4 MB ones: 1/500 of it, at least 2)")
    ap.add_argument("--variants", help="comma-separated variants to time (default: all; raw always)")
    ap.add_argument("--json", help="rank 0 writes the figures here (run_all.py reads them)")
    ap.add_argument("--port", type=int, help="the gloo group's rendezvous port (default: rank 0 picks a free one)")
    args = ap.parse_args()

    comm = mpienv.world()
    MPI = mpienv.mpi_module()
    rank, size = comm.Get_rank(), comm.Get_size()
    port = args.port or (free_port() if rank == 0 else None)  # rank 0 picks, MPI broadcasts
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(comm.bcast(port, root=0)))
    commtrace.mpi.install()
    dist.init_process_group("gloo", rank=rank, world_size=size)
    pg = dist.new_group(backend="mpi")
    path = commtrace.mpi.fastpath_status()
    pg_py = getattr(pg, "inner", pg)          # the Python group (itself when not native)
    os.environ["COMMTRACE_NATIVE"], saved = "0", os.environ.get("COMMTRACE_NATIVE")
    dist_py = dist.new_group(backend="mpi")   # a group c10d knows, on the Python path
    if saved is None:
        del os.environ["COMMTRACE_NATIVE"]
    else:
        os.environ["COMMTRACE_NATIVE"] = saved
    raw_comm = comm.Dup()
    barrier = raw_comm.Barrier

    rows = []
    for label, numel, n in (("1 element", 1, args.calls), ("4 MB", 1 << 20, max(2, args.calls // 500))):
        t = torch.ones(numel)
        t2 = torch.ones(numel)
        a = t.numpy().copy()
        tn = t.numpy()
        sync = torch_compat.make_options(dist.AllreduceOptions, async_op=False)
        bsync = torch_compat.make_options(dist.BroadcastOptions, async_op=False, rootRank=0)
        variants = {
            "raw": lambda: raw_comm.Allreduce(MPI.IN_PLACE, a, MPI.SUM),
            "raw pg comm": lambda: pg.comm.Allreduce(MPI.IN_PLACE, a, MPI.SUM),
            "raw t mem": lambda: raw_comm.Allreduce(MPI.IN_PLACE, tn, MPI.SUM),
            "pg": lambda: pg.allreduce([t], sync).wait(),
            "pg alt": lambda: (pg.allreduce([t], sync).wait(), pg.allreduce([t2], sync).wait()),
            "pg py": lambda: pg_py.allreduce([t], sync).wait(),
            "dist": lambda: dist.all_reduce(t, group=pg),
            "dist py": lambda: dist.all_reduce(t, group=dist_py),
            "dist async": lambda: dist.all_reduce(t, group=pg, async_op=True).wait(),
            "bcast": lambda: pg.broadcast([t], bsync).wait(),
            "bcast py": lambda: pg_py.broadcast([t], bsync).wait(),
        }
        if args.variants:
            keep = {"raw", *args.variants.split(",")}
            variants = {k: fn for k, fn in variants.items() if k in keep}
        for fn in variants.values():     # warm up (first calls build caches/schedules)
            for _ in range(min(n, 200)):
                fn()
        med = interleaved(variants, n, args.reps, barrier, {"pg alt": 2})
        rows.append((label, med))
        if rank == 0 and os.environ.get("BENCH_DEBUG"):
            print(label, {k: round(v * 1e6, 2) for k, v in med.items()}, flush=True)

    # DDP step: same model, data, seeds; gloo world vs the mpi group.
    def ddp_step_time(group):
        torch.manual_seed(0)
        h = args.hidden
        model = nn.Sequential(nn.Linear(10, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 5))
        ddp = DDP(model, process_group=group, bucket_cap_mb=1)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        x, y = torch.randn(32, 10), torch.randn(32, 5)

        def step():
            opt.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
        for _ in range(3):
            step()
        times = []
        for _ in range(args.ddp_steps):
            barrier()
            times.append(timed(step, 1))
        return statistics.median(times)

    ddp = {}
    for _ in range(2):                    # alternate to share machine noise
        for name, group in (("gloo", dist.group.WORLD), ("mpi", pg), ("mpi py", dist_py)):
            ddp.setdefault(name, []).append(ddp_step_time(group))
    ddp = {k: min(v) for k, v in ddp.items()}

    if rank == 0:
        print(f"ranks={size} threads={torch.get_num_threads()} "
              f"MPI thread level={MPI.Query_thread()} (3 = MULTIPLE); pg path: {path}")
        cols = tuple(c for c in ("raw", "pg", "pg alt", "pg py", "dist", "dist py", "dist async", "bcast",
                                 "bcast py") if c in rows[0][1])
        print(f"{'all_reduce':12s}" + "".join(f"{c:>12s}" for c in cols) + "   "
              + "".join(f"{c + '/raw':>15s}" for c in cols[1:]))
        for label, m in rows:
            print(f"{label:12s}" + "".join(f"{m[c] * 1e6:10.2f}us" for c in cols) + "   "
                  + "".join(f"{m[c] / m['raw']:15.2f}" for c in cols[1:]))
        h = args.hidden
        print(f"DDP step (Linear 10-{h}-{h}-5, bucket_cap_mb=1): gloo {ddp['gloo'] * 1e3:.2f} ms, "
              f"mpi {ddp['mpi'] * 1e3:.2f} ms, mpi/gloo {ddp['mpi'] / ddp['gloo']:.2f}; "
              f"Python path {ddp['mpi py'] * 1e3:.2f} ms, {ddp['mpi py'] / ddp['gloo']:.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": size, "thread_level": MPI.Query_thread(), "pg_path": path,
                           "all_reduce_us": {label: {k: v * 1e6 for k, v in m.items()} for label, m in rows},
                           "ddp_ms": {k: v * 1e3 for k, v in ddp.items()}, "hidden": h}, f, indent=1)
    dist.destroy_process_group(dist_py)
    dist.destroy_process_group(pg)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
