"""Runs under mpirun (2 ranks): ranks that disagree on async_op for the same collective.

    worker_mixed.py MODE...  each MODE in turn, in one launch, one summary line each:
    ops    every collective kind called blocking on one rank and
           async_op=True (+ wait) on the other, both ways round, and an
           async op still queued when the same rank calls a blocking one
    join   DDP with uneven inputs under torch's Join (its joined rank's
           all_reduce is blocking, the other rank's async) on gloo, then on
           init_process_group("mpi"): the final parameters must be equal

The modes share a launch because the launch is not what they test (each makes and
destroys its own process groups); the tests read each mode's line.

MPI does not match a blocking collective with a non-blocking one: an mpi backend that
issues MPI_Allreduce on one rank and MPI_Iallreduce on the other hangs here (the test's
mpirun timeout turns that into a failure). Exit 1 with a report on a wrong result.
"""
from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

import commtrace.mpi
from commtrace import mpienv

MODES = sys.argv[1:]
comm = mpienv.world()
rank, size = comm.Get_rank(), comm.Get_size()
# MASTER_ADDR, MASTER_PORT: the test's (conftest.mpirun)
commtrace.mpi.install()
failures: list[str] = []
KEEP_ALIVE = []   # each DDP lives to the end (see worker_ddp.py)


def collectives():
    """(name, call(async_op) -> (work or None, the tensors to check), expected tensors)."""
    r, n = rank, size
    out = []

    def case(name, run, want):
        out.append((name, run, want))

    def all_reduce(a):
        t = torch.full((3,), float(r + 1))
        return dist.all_reduce(t, async_op=a), [t]
    case("all_reduce", all_reduce, [torch.full((3,), float(n * (n + 1) // 2))])

    def all_reduce_large(a):   # over IALLREDUCE_ABOVE_BYTES: MPI_Iallreduce on both ranks
        t = torch.full((1000,), float(r + 1))
        return dist.all_reduce(t, async_op=a), [t]
    case("all_reduce large", all_reduce_large, [torch.full((1000,), float(n * (n + 1) // 2))])

    def broadcast(a):
        t = torch.full((4,), float(r + 7))
        return dist.broadcast(t, src=1, async_op=a), [t]
    case("broadcast", broadcast, [torch.full((4,), 8.0)])

    def all_gather(a):
        outs = [torch.zeros(2) for _ in range(n)]
        return dist.all_gather(outs, torch.full((2,), float(r)), async_op=a), outs
    case("all_gather", all_gather, [torch.full((2,), float(i)) for i in range(n)])

    def all_gather_into_tensor(a):
        o = torch.zeros(2 * n)
        return dist.all_gather_into_tensor(o, torch.full((2,), float(r)), async_op=a), [o]
    case("all_gather_into_tensor", all_gather_into_tensor,
         [torch.tensor([float(i) for i in range(n) for _ in range(2)])])

    def reduce(a):
        t = torch.full((2,), float(r + 1))
        return dist.reduce(t, dst=0, async_op=a), [t]
    case("reduce", reduce, [torch.full((2,), float(n * (n + 1) // 2) if r == 0 else float(r + 1))])

    def reduce_scatter_tensor(a):
        o = torch.zeros(2)
        return dist.reduce_scatter_tensor(o, torch.arange(2.0 * n), async_op=a), [o]
    case("reduce_scatter_tensor", reduce_scatter_tensor, [torch.arange(2.0 * r, 2.0 * r + 2) * n])

    def all_to_all_single(a):
        o = torch.zeros(n)
        return dist.all_to_all_single(o, torch.full((n,), float(r)), async_op=a), [o]
    case("all_to_all_single", all_to_all_single, [torch.arange(float(n))])

    def gather(a):
        outs = [torch.zeros(2) for _ in range(n)] if r == 0 else None
        return dist.gather(torch.full((2,), float(r)), outs, dst=0, async_op=a), outs or []
    case("gather", gather, [torch.full((2,), float(i)) for i in range(n)] if r == 0 else [])

    def scatter(a):
        o = torch.zeros(2)
        ins = [torch.full((2,), float(i + 10)) for i in range(n)] if r == 0 else None
        return dist.scatter(o, ins, src=0, async_op=a), [o]
    case("scatter", scatter, [torch.full((2,), float(r + 10))])

    def barrier(a):
        return dist.barrier(async_op=a), []
    case("barrier", barrier, [])
    return out


def check(name, got, want):
    if len(got) != len(want) or not all(torch.equal(g, w) for g, w in zip(got, want)):
        failures.append(f"[rank{rank}] {name}: got {[g.tolist() for g in got]}, "
                        f"want {[w.tolist() for w in want]}")


def mixed_ops():
    dist.init_process_group("mpi")
    checks = 0
    for async_rank in (1, 0):
        mine = rank == async_rank
        for name, run, want in collectives():
            w, got = run(mine)
            if mine:
                w.wait()
            check(f"{name} (async on rank {async_rank})", got, want)
            checks += 1
    # An async op still queued (or running) when the same rank calls a blocking one:
    # the blocking one must follow it, not overtake it.
    for name, run, want in collectives():
        first = run(rank == 0)
        second = run(rank == 1)
        for w, got in (first, second):
            if w is not None:
                w.wait()
            check(f"{name} after a pending one", got, want)
            checks += 2
    dist.destroy_process_group()
    return f"{checks} checks"


def join_training(backend):
    """DDP over uneven inputs (rank r gets 4 + 3 r batches) under Join; the final parameters."""
    if backend == "mpi":
        dist.init_process_group("mpi")
    else:
        dist.init_process_group(backend, rank=rank, world_size=size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 40), nn.ReLU(), nn.Linear(40, 3))
    ddp = DDP(model, bucket_cap_mb=0.001)     # several buckets: several async all_reduces per step
    KEEP_ALIVE.append(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)) for _ in range(4 + 3 * rank)]
    with Join([ddp]):
        for x, y in batches:
            opt.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
    state = [p.detach().clone() for p in model.parameters()]
    dist.destroy_process_group()
    return state


def join():
    g_state = join_training("gloo")
    m_state = join_training("mpi")
    for i, (a, b) in enumerate(zip(g_state, m_state)):
        if not torch.equal(a, b):
            failures.append(f"[rank{rank}] param {i} differs from gloo's "
                            f"(max abs diff {(a - b).abs().max().item()})")
    return f"{len(m_state)} parameters compared with gloo"


any_failed = False
for mode in MODES:
    failures.clear()
    summary = {"ops": mixed_ops, "join": join}[mode]()
    all_failures = comm.allgather(failures)
    any_failed = any_failed or any(all_failures)
    if rank == 0:
        flat = [f for fs in all_failures for f in fs]
        print(f"mixed {mode}: {summary} on {size} ranks, {len(flat)} failures; "
              f"mpi group: {commtrace.mpi.fastpath_status()}", flush=True)
        for f in flat[:40]:
            print(f)
time.sleep(0.05)   # torch 2.13 exit race with gloo's worker thread (see worker_ddp.py)
sys.exit(1 if any_failed else 0)
