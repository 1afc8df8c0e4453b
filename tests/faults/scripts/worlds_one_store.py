"""Two worlds made one after the other on one TCPStore (a program re-creating its default group on
its own store, or torchrun's restarts on the agent's store): world 2's rank 0 starts late, and
lazily connecting gloo lets rank 1 through its group's creation before rank 0 is there.

usage: worlds_one_store.py run PORT -- mp.spawn 2 processes, each world one all_reduce.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from on_disk import until


def main(rank, port):
    os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
    store = dist.TCPStore("127.0.0.1", int(port), 2, rank == 0, timeout=timedelta(seconds=30))
    for world in range(2):
        if world == 1 and rank == 0:
            # rank 1 reads what world 1 left in the store first: it is at world 2's id (the key
            # commtrace's hook counts a rank's worlds on the store by, capture/hook.py _world_id,
            # under torch's prefix for the default group, named "0" in each world)
            until(lambda: store.add("0//commtrace/world_id/joins/1", 0) >= 2, "rank 1 at world 2's id")
        dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
        dist.all_reduce(torch.ones(2))
        dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(sys.argv[2],), nprocs=2)
