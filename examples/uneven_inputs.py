"""DDP with uneven inputs: ranks with different numbers of batches, under model.join().

    python -m commtrace run examples/uneven_inputs.py [--base-batches 2]

Rank r gets ``base + 2*r`` batches (2 and 4 with two ranks). Without join()
the rank that runs out first would leave the others hanging in their next
gradient all_reduce. Inside ``with model.join():`` DDP adds, per step, an
all_reduce "I am still active" (Join.notify_join_context) and an all_reduce of
the require-grad-sync flag; when a rank runs out of data, Join.__exit__ keeps
answering those and "shadows" every gradient bucket all_reduce (with zeros)
until all ranks are done; then the last rank to join broadcasts its final
model so all replicas end identical.

Model: Linear(8->32) -> Tanh -> Linear(32->1), 321 parameters, one bucket.
"""
import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def master_port() -> int:
    """MASTER_PORT where it is set (as torchrun takes it), else a port free now."""
    if os.environ.get("MASTER_PORT"):
        return int(os.environ["MASTER_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, world: int, base: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + rank)
        batches = [(torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen))
                   for _ in range(base + 2 * rank)]            # uneven on purpose
        with model.join():
            for x, y in batches:
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
        print(f"rank {rank}: trained on {len(batches)} batches")
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-batches", type=int, default=2)
    ap.add_argument("--world-size", type=int, default=2)
    args = ap.parse_args()
    mp.spawn(worker, args=(args.world_size, args.base_batches, master_port()), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
