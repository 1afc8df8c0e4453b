"""DDP buffer broadcasts: a BatchNorm model syncs its buffers at every forward.

    python -m commtrace run examples/buffers.py                          # broadcast_buffers=True
    python -m commtrace run examples/buffers.py --no-broadcast-buffers   # no buffer traffic

Model: Linear(8->16) -> BatchNorm1d(16) -> ReLU -> Linear(16->2). BatchNorm
keeps running_mean and running_var (float32[16] each) and num_batches_tracked
(int64 scalar). With DDP's default broadcast_buffers=True, every forward starts
by broadcasting rank 0's buffers to all ranks (coalesced, one broadcast per
dtype: float32[32] and int64[1]); construction also broadcasts them along with
the parameters. With --no-broadcast-buffers each rank keeps its own running
statistics and both kinds of buffer traffic disappear. Gradients (210
parameters) travel in one bucket.
"""
import argparse
import os
import socket
import warnings

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


def worker(rank: int, world: int, args, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
        if args.broadcast_buffers:
            model = DDP(net)                                   # default: broadcast_buffers=True
        else:
            # torch 2.13 deprecates the flag in favour of forward_sync_buffers, whose
            # False still syncs buffers at construction; its own warning says to keep
            # broadcast_buffers=False for rank-local buffers, which is the point here.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
                model = DDP(net, broadcast_buffers=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + rank)
        for _ in range(args.steps):
            x, y = torch.randn(8, 8, generator=gen), torch.randint(0, 2, (8,), generator=gen)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        mean = net[1].running_mean[:2].tolist()
        print(f"rank {rank}: running_mean[:2] = {[round(m, 4) for m in mean]}")
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-broadcast-buffers", dest="broadcast_buffers", action="store_false",
                    help="DDP(broadcast_buffers=False): no buffer broadcast per forward")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--world-size", type=int, default=2)
    args = ap.parse_args()
    mp.spawn(worker, args=(args.world_size, args, master_port()), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
