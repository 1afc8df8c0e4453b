"""Runs under mpirun (traced by ``commtrace run`` in the test): a torch.compile'd
DDP model and a compiled functional all_reduce, first on gloo, then on the mpi4py
backend. C++ calls the backend's Python methods while compiled code runs; Dynamo
must leave them alone (commtrace.dynamo). Prints "compiled: match" when both
backends give bit-identical parameters and results (2 ranks).

Dynamo's backend is aot_eager: what must hold here is Dynamo's (and DDPOptimizer's)
treatment of the backend's frames, which is the same for every compiler backend;
Inductor's C++ kernel builds would only add ~10 s per run (tests/capture/test_compile.py
keeps Inductor, the default, on gloo)."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch.nn.parallel import DistributedDataParallel as DDP

import commtrace.mpi
from commtrace import mpienv

BACKEND = "aot_eager"
comm = mpienv.world()
rank, size = comm.Get_rank(), comm.Get_size()
# MASTER_ADDR, MASTER_PORT: the test's (conftest.mpirun)
commtrace.mpi.install()


@torch.compile(backend=BACKEND)
def compiled_all_reduce(x):
    return fc.all_reduce(x * 2, "sum", dist.group.WORLD) + 1


def train(backend):
    if backend == "mpi":
        dist.init_process_group("mpi")
    else:
        dist.init_process_group(backend, rank=rank, world_size=size)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    ddp = torch.compile(DDP(model), backend=BACKEND)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(3):
        opt.zero_grad()
        ddp(torch.randn(8, 32, generator=g)).square().mean().backward()
        opt.step()
    out = [p.detach().clone() for p in model.parameters()] + [compiled_all_reduce(torch.ones(4))]
    dist.barrier()
    dist.destroy_process_group()
    return out


gloo, mpi = train("gloo"), train("mpi")
same = all(torch.equal(a, b) for a, b in zip(gloo, mpi))
print(f"rank {rank} compiled: {'match' if same else 'MISMATCH'}", flush=True)
time.sleep(0.05)  # see Recorder.EXIT_SETTLE_S
