"""torch.compile'd DDP whose gradients fill several buckets, then a compiled functional
all_reduce, 2 forked gloo ranks: 4 Linear(512, 512), bucket_cap_mb=1 (each layer's 1,050,624
bytes of gradients a bucket of its own once DDP rebuilt them), 3 steps.

``compiled_ddp.py PORT OUT``: rank 0 writes a hash of the parameters and of the compiled
function's result to OUT. While compiled code runs, C++ (DDP's reducer, functional
collectives) calls back into ProcessGroup methods written in Python, which Dynamo must not
try to compile (commtrace.dynamo).
"""
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS, LAYERS, WIDTH = 3, 4, 512


@torch.compile
def compiled_all_reduce(x):
    return fc.all_reduce(x * 2, "sum", dist.group.WORLD) + 1


def main(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(LAYERS)]),
                bucket_cap_mb=1)
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for _ in range(STEPS):
        compiled(torch.randn(8, WIDTH, generator=g)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    y = compiled_all_reduce(torch.ones(4))
    h = hashlib.sha256(y.numpy().tobytes())
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    if rank == 0:
        with open(out, "w") as fh:
            fh.write(h.hexdigest())
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.05)  # see Recorder.EXIT_SETTLE_S: gloo may still drop a Work at exit


if __name__ == "__main__":
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(main, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2, start_method="fork")
