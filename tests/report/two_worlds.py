"""Two worlds one after another in one traced run, as a test suite makes them: each world is 2
fresh ranks (torch.multiprocessing.spawn: new processes, a new init_process_group), so each world
has its own rank 0 and rank 1, and its own group 0 (test fixture of tests/report/test_worlds.py).

usage: two_worlds.py PORT SECOND_PORT (each world's rendezvous)

World 0: 3 all_reduces, rank 0 sends to rank 1, then 2 DDP steps. World 1: 5 all_reduces, a
broadcast, rank 1 sends to rank 0, then 3 DDP steps. Each op count differs, so a report that
merges a rank across worlds shows visibly wrong numbers.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# world -> (all_reduces, broadcasts, p2p sender, DDP steps)
PLAN = {0: (3, 0, 0, 2), 1: (5, 1, 1, 3)}


def world(rank, port, which):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    reduces, broadcasts, sender, steps = PLAN[which]
    t = torch.ones(4 * (which + 1))
    for _ in range(reduces):
        dist.all_reduce(t)
    for _ in range(broadcasts):
        dist.broadcast(t, src=0)
    if rank == sender:
        dist.send(torch.arange(8.0), dst=1 - rank)
    else:
        dist.recv(torch.zeros(8), src=sender)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 6)).sum().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(world, args=(int(sys.argv[1]), 0), nprocs=2)
    mp.spawn(world, args=(int(sys.argv[2]), 1), nprocs=2)
