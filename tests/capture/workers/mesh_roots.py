"""The same broadcast call (one line, one shape, group root 0) on each dimension's group of a
2x2 DeviceMesh: its root, as a global rank, differs by group. Also a send on two groups.

``mesh_roots.py WORLD PORT OUT`` starts WORLD (4) ranks; each writes OUT.rank<R>: the global roots.
"""
import json

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
    roots = []
    for dim in ("a", "b"):
        group = mesh.get_group(dim)
        roots.append(dist.get_global_rank(group, 0))
        dist.broadcast(torch.ones(3), group_src=0, group=group)
    dist.barrier()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"roots": roots}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
