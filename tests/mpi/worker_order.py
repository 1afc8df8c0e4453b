"""Runs under mpirun (2 ranks): a communicator's collectives' futures complete in issue order.

Each round, every rank issues three all_reduces over IALLREDUCE_ABOVE_BYTES (MPI_Iallreduce):
A (32 MiB), then B and C (1 KiB), attaching ``then`` callbacks to A's and B's futures and
taking C's future only after C's own wait() returned, and records the order the callbacks
ran in. Rank 1 enters each round late, so A (many rounds of MPI messages) is still running
when B and C (one message each) are done: without ordering B's callback ran before A's, and
C's future was complete at once. A's callback also waits on the later work C (Work.wait must
not depend on future order: that would hang) and a callback on B raises (the next futures must
still complete). Odd rounds first queue an async broadcast D: then the worker thread issues
A, B and C behind it, and D's future (finished by the worker) must come first. Last, a callback waits for a large
all_reduce queued behind a broadcast (the worker hands its request to the progress thread,
which runs the callback). Prints "order: R rounds on 2 ranks, F out of order" (F: both ranks' failures); exit 1 on a failure.
"""
from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

import commtrace.mpi
from commtrace import mpienv

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
comm = mpienv.world()
rank = comm.Get_rank()
commtrace.mpi.install()
dist.init_process_group("mpi")

bad = []
for i in range(ROUNDS):
    ran = []
    a_buf = torch.full((8 << 20,), float(rank + 1))
    b_buf = torch.full((256,), float(rank + 1))
    c_buf = torch.full((256,), float(rank + 1))
    if rank == 1:
        time.sleep(0.05)   # the other rank's A waits for this one: its B and C finish first
    queued = i % 2 == 1
    if queued:
        d_buf = torch.full((4,), float(rank + 1))
        fd = dist.broadcast(d_buf, src=1, async_op=True).get_future().then(lambda f: ran.append("D"))
    a = dist.all_reduce(a_buf, async_op=True)
    b = dist.all_reduce(b_buf, async_op=True)
    c = dist.all_reduce(c_buf, async_op=True)

    def after_a(f, c=c):
        ran.append("A")
        c.wait()          # a later work: done by MPI, whatever its future's order
        return f.value()

    def after_b(f):
        ran.append("B")
        raise ValueError("a callback that raises")   # must not stop the later futures

    fa = a.get_future().then(after_a)
    fb = b.get_future().then(after_b)
    c.wait()
    fc = c.get_future().then(lambda f: ran.append("C"))
    fa.wait()
    fc.wait()
    try:
        fb.wait()
    except Exception:  # noqa: BLE001 -- after_b's error, as expected
        pass
    want = float(sum(range(1, dist.get_world_size() + 1)))
    if queued:
        fd.wait()
    if ran != ["D", "A", "B", "C"][0 if queued else 1:]:
        bad.append(f"round {i}: callbacks ran {ran}")
    for name, t in (("A", a_buf), ("B", b_buf), ("C", c_buf)):
        if not torch.all(t == want):
            bad.append(f"round {i}: {name} wrong")

# A callback (the progress thread runs it) that waits for a large all_reduce queued behind a
# broadcast: the worker starts it as a request only the progress thread, busy in the callback,
# would test (hung: the callback must take it over).
nested = []


def waits_for_queued(f):
    if rank == 1:
        time.sleep(0.05)      # rank 0's broadcast is still running when its all_reduce comes
    dist.broadcast(torch.zeros(4), src=0, async_op=True)       # holds the queue while it runs
    e_buf = torch.full((1 << 14,), float(rank + 1))
    dist.all_reduce(e_buf, async_op=True).wait()
    nested.append(float(e_buf[0]))
    return f.value()


dist.all_reduce(torch.ones(1 << 14), async_op=True).get_future().then(waits_for_queued).wait()
if nested != [float(sum(range(1, dist.get_world_size() + 1)))]:
    bad.append(f"a callback waiting for a queued all_reduce saw {nested}")

total = comm.allreduce(len(bad))
dist.destroy_process_group()
for line in bad:
    print(f"rank {rank}: {line}", flush=True)
if rank == 0:
    print(f"order: {ROUNDS} rounds on 2 ranks, {total} out of order", flush=True)
sys.exit(1 if bad else 0)
