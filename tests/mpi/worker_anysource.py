"""Runs under mpirun: rank 0 receives from any source, the others send it their rank.

Each receive is left to the progress thread to finish (no wait() until it is done), as a
program that waits late does; the sender must then still be known: torch's dist.recv()
returns it and checks nothing else (the progress thread's MPI_Testsome once dropped it and
said -1, seen on torch's test_send_recv_any_source under commtrace run)."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

import commtrace.mpi

commtrace.mpi.install()
dist.init_process_group("mpi")
rank, n = dist.get_rank(), dist.get_world_size()
ROUNDS = 5
if rank == 0:
    bad, senders = [], []
    for _ in range(ROUNDS * (n - 1)):
        out = torch.full((8,), -1.0)
        work = dist.irecv(out)          # src=None: ProcessGroup.recv_anysource
        deadline = time.monotonic() + 30
        while not work._done and time.monotonic() < deadline:   # the progress thread finishes it
            time.sleep(0.001)
        work.wait()
        sender = work._source_rank()
        senders.append(sender)
        if not (1 <= sender < n and out.eq(sender).all()):
            bad.append((sender, out[0].item()))
    print(f"anysource: {ROUNDS * (n - 1)} receives on {n} ranks, wrong senders: {bad}", flush=True)
    print(f"received from: {senders}", flush=True)
else:
    for _ in range(ROUNDS):
        dist.send(torch.full((8,), float(rank)), 0)
dist.barrier()
dist.destroy_process_group()
