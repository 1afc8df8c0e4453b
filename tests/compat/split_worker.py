"""dist.split_group on gloo: 2 ranks (torch.multiprocessing.spawn) split the world into one
group [0, 1], all_reduce and barrier on it (test fixture of test_smoke.py). Releases whose
split_group needs an accelerator bound to the world (torch <= 2.13 on CPU) fail untraced.

usage: split_worker.py PORT    prints one JSON line per rank: its rank and the all_reduce's sum
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    group = dist.split_group(split_ranks=[[0, 1]])
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, group=group)
    dist.barrier(group=group)
    print(json.dumps({"rank": rank, "sum": t.tolist()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank_main, args=(int(sys.argv[1]),), nprocs=2)
