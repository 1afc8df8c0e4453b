"""DDP on gloo, for the exact-sequence and bitwise-identity tests.

``ddp.py WORLD PORT OUT STEPS``: starts WORLD ranks. Three phases, each opened by
one dist.barrier() so the test can split the trace:
  A. Sequential(Linear(512,512) x3), bucket_cap_mb=1, STEPS SGD steps; its forward takes
     a keyword named ``ddp`` (commtrace's forward wrapper must pass it through).
  B. Linear(8,8)+BatchNorm1d(8), broadcast_buffers=True, 2 forward/backward steps.
  C. the same with broadcast_buffers=False, 2 steps.
Rank 0 saves the parameters of A (torch.save) to OUT.params.pt.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Sequential(nn.Sequential):
    """nn.Sequential whose forward takes a keyword of its own (named as DDP's wrapper's first parameter)."""

    def forward(self, x, ddp=None):
        return super().forward(x)


def train(model, steps, dim, seed, **kwargs):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(seed + dist.get_rank())
    for _ in range(steps):
        x = torch.randn(4, dim, generator=g)
        opt.zero_grad()
        model(x, **kwargs).square().sum().backward()
        opt.step()


def main(rank, world, out, steps):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(0)
    dist.barrier()
    a = DDP(Sequential(nn.Linear(512, 512), nn.Linear(512, 512), nn.Linear(512, 512)), bucket_cap_mb=1)
    train(a, steps, 512, 1, ddp=True)
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in a.module.state_dict().items()}, out + ".params.pt")
    for phase, bb in (("B", True), ("C", False)):
        dist.barrier()
        torch.manual_seed(1)
        m = DDP(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)), broadcast_buffers=bb)
        train(m, 2, 8, 2)
    dist.barrier()
    dist.destroy_process_group()
    # torch 2.13 exit race, untraced: gloo's worker thread destroys the last
    # finished Work (which may take the GIL) just after the caller moved on; if
    # the interpreter is finalizing by then the process aborts. commtrace pauses
    # at exit for this (Recorder._close_at_exit); this untraced baseline pauses itself.
    time.sleep(0.05)


if __name__ == "__main__":
    import torch.multiprocessing as mp
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = sys.argv[2]
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(main, args=(int(sys.argv[1]), sys.argv[3], int(sys.argv[4])), nprocs=int(sys.argv[1]),
                       start_method="fork")
