"""Runs under mpirun: a few ops of the mpi backend under torch's profiler (record_shapes=True), then
their ``mpi:<op>`` events are checked as torch's DistributedTest checks a C++ backend's: one per op,
titled as torch's ProcessGroupMPI titles it, async, with the op's input shapes. Then the same ops
with no profiler on must leave nothing behind (no event in a later profile).

The fast path (COMMTRACE_NATIVE=1) marks every event async, as c10d's Work does. The Python group
alone (COMMTRACE_NATIVE=0) cannot: there an event is async only when it ended on another thread, so
only the async all_reduce (finished by the group's worker thread) is required to be."""
from __future__ import annotations

import collections
import os

import torch
import torch.distributed as dist

import commtrace.mpi

commtrace.mpi.install()
dist.init_process_group("mpi")
rank, n = dist.get_rank(), dist.get_world_size()
native = os.environ.get("COMMTRACE_NATIVE") != "0"
failures = []


def ops():
    """The profiled ops; returns {title: [expected input shapes of each event]}."""
    want = collections.defaultdict(list)
    small, big = torch.ones(3), torch.ones(5, 100)       # fast path / MPI_Iallreduce (> 256 bytes)
    dist.all_reduce(small)
    dist.all_reduce(big)
    dist.all_reduce(small, async_op=True).wait()
    want["mpi:all_reduce"] += [[[3]], [[5, 100]], [[3]]]
    dist.broadcast(torch.zeros(2, 3), src=0)
    want["mpi:broadcast"].append([[2, 3]])
    # a ring: each rank sends to the next, receives from the previous (blocking send/recv)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    if rank % 2 == 0:
        dist.send(torch.ones(4, rank + 1), nxt)
        dist.recv(torch.empty(4, prv + 1), prv)
    else:
        dist.recv(torch.empty(4, prv + 1), prv)
        dist.send(torch.ones(4, rank + 1), nxt)
    want["mpi:send"].append([[4, rank + 1]])
    want["mpi:recv"].append([[4, prv + 1]])
    if rank == 0:   # a recv from any source from every other rank
        for _ in range(n - 1):
            dist.recv(torch.empty(6))
            want["mpi:recvAnySource"].append([[6]])
    else:
        dist.send(torch.ones(6), 0)
        want["mpi:send"].append([[6]])
    dist.barrier()
    want["mpi:barrier"].append([])
    return want


def check(cond, what):
    if not cond:
        failures.append(what)


with torch.autograd.profiler.profile(record_shapes=True) as prof:
    want = ops()
got = collections.defaultdict(list)
for e in prof.function_events:
    if e.name.startswith("mpi:"):
        got[e.name].append(e)
check(set(got) == set(want), f"titles {sorted(got)} != {sorted(want)}")
for title, shapes in want.items():
    evs = got.get(title, [])
    check(len(evs) == len(shapes), f"{title}: {len(evs)} events, {len(shapes)} ops")
    check(all(e.count == 1 and e.cpu_time >= 0 for e in evs), f"{title}: count/cpu_time")
    check(sorted(e.input_shapes for e in evs) == sorted(shapes),
          f"{title}: shapes {[e.input_shapes for e in evs]} != {shapes}")
    if native:
        check(all(e.is_async for e in evs), f"{title}: not async: {[e.input_shapes for e in evs]}")
check(any(e.is_async and e.input_shapes == [[3]] for e in got["mpi:all_reduce"]),
      "the async all_reduce's event is not async")

ops()                      # no profiler: no event, and nothing left open for the next profile
with torch.autograd.profiler.profile(record_shapes=True) as prof:
    torch.ones(1).add_(1)
check(not [e.name for e in prof.function_events if e.name.startswith("mpi:")], "events without a profiler")

path = commtrace.mpi.fastpath_status()
print(f"profiler events: {sum(map(len, want.values()))} ops on {n} ranks, path {path.split(':')[0]}, "
      f"failures: {failures}", flush=True)
dist.destroy_process_group()
