"""A small DDP training job for the bounded-mode tests, under any launcher.

``train.py STEPS [spawn WORLD PORT]``: STEPS optimizer steps of DDP on gloo
(two buckets), plus one plain all_reduce per step and a barrier at the end.
With ``spawn`` it starts WORLD ranks itself (torch.multiprocessing.spawn);
otherwise the launcher's RANK / WORLD_SIZE (torchrun; mpirun under ``commtrace
run``) or Open MPI's own variables (plain mpirun, with MASTER_ADDR/MASTER_PORT
passed by ``-x``) say who it is. Prints nothing.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, world: int, steps: int) -> None:
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64)), bucket_cap_mb=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 64)
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()
        dist.all_reduce(torch.ones(8))
    dist.barrier()
    dist.destroy_process_group()


def spawned(rank: int, world: int, steps: int) -> None:
    train(rank, world, steps)


if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2] == "spawn":
        import torch.multiprocessing as mp
        world = int(sys.argv[3])
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = sys.argv[4]
        mp.spawn(spawned, args=(world, steps), nprocs=world)
    else:
        env = os.environ
        train(int(env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", "0"))),
              int(env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", "1"))), steps)
