"""One DDP training run with a given --bucket-cap-mb; run it several times to see bucketing.

    python -m commtrace run -o commtrace-out/sweep-1 examples/bucket_sweep.py --bucket-cap-mb 1
    sh examples/bucket_sweep.sh          # 0.25, 1 and 25 MiB, then `commtrace compare`

Model: six Linear(300->300) layers with ReLUs between them. Each weight is
90,000 float32 = 360,000 bytes (0.34 MiB), each bias 1,200 bytes; 2.07 MiB in
all. Step 1 always sends all gradients in one all_reduce. At the start of
step 2 DDP rebuilds its buckets in gradient-ready order (last layer first,
bias before weight), closing a bucket as soon as it reaches the cap:

    --bucket-cap-mb 25    1 bucket/step   (2,167,200 bytes: everything fits)
    --bucket-cap-mb 1     2 buckets/step  (3 layers = 1,083,600 bytes >= 1 MiB each)
    --bucket-cap-mb 0.25  6 buckets/step  (one layer = 361,200 bytes >= 0.25 MiB each)

The bytes moved per step are the same; only how they are cut up changes.
An explicit cap also applies to DDP's first bucket (only the default cap gets
the special 1 MiB first bucket). Ranks are started with mp.spawn on gloo.
"""
import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH, LAYERS = 300, 6


def master_port() -> int:
    """MASTER_PORT where it is set (as torchrun takes it), else a port free now."""
    if os.environ.get("MASTER_PORT"):
        return int(os.environ["MASTER_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model() -> nn.Module:
    layers = []
    for i in range(LAYERS):
        layers.append(nn.Linear(WIDTH, WIDTH))
        if i < LAYERS - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def bucket_sizes(model: DDP) -> str:
    """The buckets DDP uses after its rebuild at step 2: the logging data's
    "bucket_sizes" keeps construction's layout (one bucket here, whatever the cap)."""
    logged = model._get_ddp_logging_data()
    return logged.get("rebuilt_bucket_sizes") or f"{logged.get('bucket_sizes')} (not rebuilt)"


def worker(rank: int, world: int, args, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = DDP(build_model(), bucket_cap_mb=args.bucket_cap_mb)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(100 + rank)
        for _ in range(args.steps):
            x = torch.randn(16, WIDTH, generator=gen)
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"bucket_cap_mb={args.bucket_cap_mb}: bucket sizes (bytes) {bucket_sizes(model)}")
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--world-size", type=int, default=2)
    args = ap.parse_args()
    mp.spawn(worker, args=(args.world_size, args, master_port()), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
