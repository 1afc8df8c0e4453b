"""A small 2-rank gloo DDP job, spawned with torch.multiprocessing (test fixture).

usage: spawn_ddp.py PORT [p2p]   (p2p adds a send/recv pair; the report tests turn it on)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, p2p):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.ones(4)
    dist.all_reduce(t)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    dist.broadcast(t, 0)
    dist.barrier()
    out = [torch.zeros(4) for _ in range(world)]
    dist.all_gather(out, t)
    if p2p and rank == 0:
        dist.send(torch.arange(8.0), dst=1)
    elif p2p:
        buf = torch.zeros(8)
        dist.recv(buf, src=0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        opt.zero_grad()
        model(torch.randn(8, 10)).sum().backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1]), sys.argv[2:3] == ["p2p"]), nprocs=2)
