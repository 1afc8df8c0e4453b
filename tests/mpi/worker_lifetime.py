"""Runs under mpirun: DDP forwards on the mpi backend, each broadcasting a BatchNorm's
buffers (float and int64: two broadcasts in flight inside c10d's broadcast_coalesced).

On torch releases whose C++ keeps only the C++ half of a Python Work (2.4), a work whose
Python half was freed before C++ waited on it left that wait hanging forever: with the
progress thread (MPI_THREAD_MULTIPLE) when it finished both broadcasts before the first
wait (a race, hence the repetitions), and on every op when MPI runs below
MPI_THREAD_MULTIPLE (argv[1] "serialized": ops finish inside the call).
"""
from __future__ import annotations

import sys

import mpi4py

LEVEL = sys.argv[1] if len(sys.argv) > 1 else "multiple"
FORWARDS = int(sys.argv[2]) if len(sys.argv) > 2 else 100
mpi4py.rc.thread_level = LEVEL   # before MPI_Init: commtrace keeps a level set by the program
from mpi4py import MPI  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import commtrace.mpi  # noqa: E402
from commtrace.mpi import runtime  # noqa: E402

commtrace.mpi.install()
dist.init_process_group("mpi")
rank = dist.get_rank()
assert (runtime.progress is None) == (MPI.Query_thread() < MPI.THREAD_MULTIPLE)
# run after other workers in one process (tests/mpi/workers.py), MPI was initialized before this
# script set its level: "multiple" must still be what the process runs at
assert LEVEL != "multiple" or MPI.Query_thread() == MPI.THREAD_MULTIPLE, MPI.Query_thread()
torch.manual_seed(rank)             # different buffers on every rank until broadcast
model = DDP(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))
bn = model.module[1]
x = torch.randn(8, 4)
for i in range(FORWARDS):          # (with grad: DDP skips the broadcast after a no_grad forward)
    model(x + rank)                 # BatchNorm updates its buffers; the next forward broadcasts rank 0's
model.eval()
model(x)                            # broadcasts once more, updates nothing
want = torch.tensor(float(FORWARDS))
got = [torch.zeros(1) for _ in range(dist.get_world_size())]
dist.all_gather(got, bn.running_mean[:1].clone())
assert all(torch.equal(g, got[0]) for g in got), got
assert bn.num_batches_tracked.item() == FORWARDS, bn.num_batches_tracked
dist.destroy_process_group()
if rank == 0:
    print(f"lifetime {LEVEL}: {FORWARDS} forwards, buffers agree on {len(got)} ranks")
