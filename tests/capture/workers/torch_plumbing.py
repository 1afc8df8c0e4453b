"""Ops reached through torch's own Python plumbing, in a 1-rank gloo world: torch 2.13's deprecated
all_gather_into_tensor and reduce_scatter_tensor (wrapped by typing_extensions' ``deprecated``), and
an all_reduce refused by a TorchDispatchMode (its ValueError must reach the caller as it is).
Prints what it saw. usage: torch_plumbing.py STORE_FILE"""
import sys

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode


class Refuse(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.c10d.allreduce_.default:
            raise ValueError("refused by the mode")
        return func(*args, **(kwargs or {}))


dist.init_process_group("gloo", store=dist.FileStore(sys.argv[1], 1), rank=0, world_size=1)
gathered = torch.empty(3)
dist.all_gather_into_tensor(gathered, torch.ones(3))
dist.reduce_scatter_tensor(torch.empty(3), gathered)
try:
    with Refuse():
        dist.all_reduce(torch.ones(2))
except Exception as e:  # the program's own report
    print("raised", type(e).__name__, e)
dist.destroy_process_group()
