"""2-rank gloo DDP with gradient accumulation (test fixture for step-centric reports).

usage: accum_ddp.py PORT

4 optimizer steps of 2 micro-steps each (the first under no_sync()), an
evaluation forward under no_grad after step 2, and after the loop a barrier and
an all_gather_object -- which must land "after the last step".
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(4):
        opt.zero_grad()
        with model.no_sync():
            model(torch.randn(8, 16)).sum().backward()
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
        if step == 1:
            with torch.no_grad():
                model(torch.randn(8, 16))
    dist.barrier()
    out = [None] * world
    dist.all_gather_object(out, {"rank": rank})
    dist.destroy_process_group()


if __name__ == "__main__":
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(worker, args=(2, int(sys.argv[1])), nprocs=2, start_method="fork")
