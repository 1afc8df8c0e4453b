"""What every trainer program of the matrix shares: tiny data and where losses go.

Each program writes, per rank, the loss of every micro-batch it trained on (in
order) to ``<out>.rank<N>`` as JSON, so a test compares traced and untraced runs.
"""
import json
import os
import sys

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
    """End the program without the interpreter's teardown, after every rank left
    the process group cleanly (barrier, then destroy).

    With gloo, torch's own teardown at exit sometimes aborts a rank ("terminate
    called without an active exception"), untraced as well as traced: seen in the
    HF Trainer's, accelerate's, Lightning's and the plain loop's runs here (CI
    too), after their last step. These programs are references for losses and step
    counts, not tests of torch's exit, so they end as many training scripts do,
    with ``os._exit`` (which ``commtrace run`` follows: it closes the trace first)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
