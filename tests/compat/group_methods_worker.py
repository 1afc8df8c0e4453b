"""Methods of a group that torch runs on the group object itself (test fixture of
test_smoke.py): 2 ranks (torch.multiprocessing.spawn) register a pre- and a post-hook on
the world group, all_reduce, split the world into one group [0, 1] and all_reduce and barrier
on it -- each where this torch has it (split_group on a CPU-only world: 2.15+; hooks: 2.15+).

usage: group_methods_worker.py PORT OUT    writes OUT.rankN.json per rank: what it did and saw
(a file, not stdout: gloo of some releases prints its connection lines there in pieces)
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, port: int, path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    world, out = dist.group.WORLD, {"rank": rank}
    if hasattr(world, "register_pre_hook"):
        out["hooks"] = []
        world.register_pre_hook(1, lambda args: out["hooks"].append("pre"))
        world.register_post_hook(2, lambda args: out["hooks"].append("post"))
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    out["sum"] = t.tolist()
    try:
        group = dist.split_group(split_ranks=[[0, 1]])
    except (AttributeError, RuntimeError, ValueError) as e:   # no split_group, or it needs an accelerator
        out["split"] = type(e).__name__
    else:
        dist.all_reduce(t, group=group)
        dist.barrier(group=group)
        out["split"] = t.tolist()
    with open(f"{path}.rank{rank}.json", "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank_main, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
