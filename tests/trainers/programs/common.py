"""What every trainer program of the matrix shares: tiny data and where losses go.

Each program writes, per rank, the loss of every micro-batch it trained on (in
order) to ``<out>.rank<N>`` as JSON, so a test compares traced and untraced runs.
"""
import json

import torch
import torch.distributed as dist


def data(n: int = 32, features: int = 8):
    """The same tiny regression set in every process (fixed seed)."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, features, generator=g), torch.randn(n, 1, generator=g)


def write_losses(out: str, rank: int, losses: list) -> None:
    with open(f"{out}.rank{rank}", "w") as f:
        json.dump([float(x) for x in losses], f)



def finish() -> None:
    """Leave the process group cleanly: every rank reaches a barrier, then the
    group is destroyed. Trainers that leave it to interpreter exit (the HF
    Trainer does) race gloo's threads against the peer's exit, and a rank can
    abort with "terminate called without an active exception", traced or not.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
