"""multiprocessing children that end badly: how each ended must reach its trace.

``child_exit.py METHOD PORT``: two ``mp.Process`` (start method METHOD) form a 2-rank gloo world
and all_reduce once; then rank 0 leaves with ``sys.exit(10)`` (as a failing MultiProcessTestCase
rank does) and rank 1 raises ValueError. Prints each child's exit code.
"""
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    dist.all_reduce(torch.ones(3))
    dist.destroy_process_group()
    if rank == 0:
        sys.exit(10)
    raise ValueError("rank 1 gives up")


if __name__ == "__main__":
    method, port = sys.argv[1:3]
    ctx = mp.get_context(method)
    procs = [ctx.Process(target=rank_main, args=(r, port)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    print("exit codes", [p.exitcode for p in procs])
