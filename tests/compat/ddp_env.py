"""A small DDP training that takes its rank from the environment (torchrun, or
`commtrace run` under mpirun, whose launcher glue sets RANK/WORLD_SIZE/MASTER_*).

    ddp_env.py BACKEND STEPS OUT      # BACKEND: gloo or mpi; OUT: <OUT>.rank<R>.json

Model: Linear(16,64)-ReLU-Linear(64,4), 1,348 float32 parameters: one DDP bucket,
so each rank issues, in order: construction all_gather + broadcast (parameter
check) + broadcast (module state); step 1: one all_reduce; step 2: two int32
broadcasts (bucket rebuild) + one all_reduce; each later step: one all_reduce.
Each rank writes its losses, to compare a traced run with an untraced one.
"""
import json
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main(backend: str, steps: int, out: str) -> None:
    dist.init_process_group(backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump(losses, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
