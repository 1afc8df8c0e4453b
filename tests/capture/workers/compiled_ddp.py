"""torch.compile'd DDP and a compiled functional all_reduce, 2 spawned gloo ranks.

``compiled_ddp.py PORT OUT``: rank 0 writes a hash of the parameters and of the
compiled function's result to OUT. While compiled code runs, C++ (DDP's reducer,
functional collectives) calls back into ProcessGroup methods written in Python,
which Dynamo must not try to compile (commtrace.dynamo).
"""
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

@torch.compile
def compiled_all_reduce(x):
    return fc.all_reduce(x * 2, "sum", dist.group.WORLD) + 1


def main(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    m = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    cm = torch.compile(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(3):
        opt.zero_grad()
        cm(torch.randn(8, 32, generator=g)).square().mean().backward()
        opt.step()
    y = compiled_all_reduce(torch.ones(4))
    h = hashlib.sha256(y.numpy().tobytes())
    for p in m.parameters():
        h.update(p.detach().numpy().tobytes())
    if rank == 0:
        with open(out, "w") as fh:
            fh.write(h.hexdigest())
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.05)  # see Recorder.EXIT_SETTLE_S: gloo may still drop a Work at exit


if __name__ == "__main__":
    mp.spawn(main, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
