"""Plain DDP training on the "mpi" backend: rank and size come from MPI.

    mpirun -n 2 python -m commtrace run examples/ddp_mpi.py [--hidden 1000]

Nothing here knows about commtrace: on a torch built with MPI it runs as is.
PyPI torch has no MPI: there it needs commtrace's "mpi" backend, which
`commtrace run` installs (or commtrace.mpi.install()); run bare, it says so.

Model: Linear(10->H) -> ReLU -> Linear(H->H) -> ReLU -> Linear(H->5), DDP with
bucket_cap_mb=1, DistributedSampler over a synthetic TensorDataset, SGD.
--hidden defaults to 10000 (the issue's model: 100M parameters, 400 MB of
weights per rank, several seconds per step on a laptop); demos and tests pass
a smaller --hidden to stay within a few seconds.
"""
import argparse
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=10000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args()

    try:
        dist.init_process_group("mpi")
    except RuntimeError as e:   # "Distributed package doesn't have MPI built in" (PyPI torch)
        if "MPI" not in str(e):
            raise
        sys.exit("ddp_mpi.py: this torch has no MPI backend; commtrace provides one: "
                 "mpirun -n 2 python -m commtrace run examples/ddp_mpi.py")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)                     # same data and initial weights everywhere
    x = torch.randn(args.samples, 10)
    y = torch.randn(args.samples, 5)
    ds = TensorDataset(x, y)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=args.batch, sampler=sampler)

    h = args.hidden
    model = nn.Sequential(nn.Linear(10, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 5))
    ddp = DDP(model, bucket_cap_mb=1)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    if rank == 0:
        print(f"backend={dist.get_backend()} world={world} hidden={h} "
              f"params={sum(p.numel() for p in model.parameters())}", flush=True)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            opt.step()
            if rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.6f} "
                      f"({(time.perf_counter() - t0) * 1e3:.1f} ms)", flush=True)
            step += 1
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
