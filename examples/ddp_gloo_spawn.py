"""Small DDP training on gloo, ranks started by torch.multiprocessing.spawn.

    python -m commtrace run examples/ddp_gloo_spawn.py [--world-size 2] [--steps 4]

The script starts its own ranks (mp.spawn) on MASTER_PORT (a free port where it is unset), so it
runs the same with or without commtrace. The one commtrace call in it,
``commtrace.region("eval")``, is a documented no-op when not tracing; without
commtrace installed at all the region falls back to a null context.

Model: Linear(16->64) -> ReLU -> Linear(64->4): 1,348 float32 parameters
(5.4 KB), far below DDP's 1 MiB first bucket, so every step has exactly ONE
gradient all_reduce. A final no_grad evaluation pass all_reduces the summed
loss inside ``commtrace.region("eval")``.
"""
import argparse
import contextlib
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

try:
    from commtrace import region
except ImportError:  # commtrace not installed: the script still runs
    def region(label):
        return contextlib.nullcontext()


def master_port() -> int:
    """MASTER_PORT where it is set (as torchrun takes it), else a port free now."""
    if os.environ.get("MASTER_PORT"):
        return int(os.environ["MASTER_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


def worker(rank: int, world: int, steps: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)                       # same initial weights everywhere
        model = DDP(build_model())
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        loss_fn = nn.MSELoss()
        gen = torch.Generator().manual_seed(100 + rank)   # each rank its own data
        for _ in range(steps):
            x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        with region("eval"), torch.no_grad():
            x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
            total = loss_fn(model.module(x), y).reshape(1)
            dist.all_reduce(total)
        if rank == 0:
            print(f"eval loss (mean over {world} ranks): {total.item() / world:.4f}")
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    mp.spawn(worker, args=(args.world_size, args.steps, master_port()), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
