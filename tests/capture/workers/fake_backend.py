"""One process playing rank 1 of a 4-rank world on c10d's "fake" backend (a dry run: no peer
exists, every collective returns at once): plain collectives, torch's deprecated
all_gather_into_tensor and reduce_scatter_tensor (wrapped by typing_extensions' ``deprecated``),
an FSDP2 step and a tensor-parallel step on a DeviceMesh. Writes what it saw to argv[1]."""
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

RANK, WORLD = 1, 4


def main(out_path):
    dist.init_process_group("fake", rank=RANK, world_size=WORLD, store=FakeStore())
    t = torch.ones(8)
    dist.all_reduce(t)
    gathered = torch.empty(8 * WORLD)
    dist.all_gather_into_tensor(gathered, t)          # line ALL_GATHER
    dist.reduce_scatter_tensor(torch.empty(2), gathered[:8])

    # FSDP2 (DDP on fake fails untraced in torch 2.13: its Work's future holds None)
    model = fully_shard(torch.nn.Linear(4, 4))
    model(torch.randn(2, 4)).sum().backward()

    mesh = init_device_mesh("cpu", (WORLD,))
    tp = parallelize_module(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)), mesh,
                            {"0": ColwiseParallel(), "1": RowwiseParallel()})
    tp(torch.randn(2, 4)).sum().backward()
    dist.destroy_process_group()
    with open(out_path, "w") as f:
        json.dump({"gathered": gathered.shape[0]}, f)


if __name__ == "__main__":
    main(sys.argv[1])
