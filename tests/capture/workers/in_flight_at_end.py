"""2 gloo ranks: two float32 all_reduces of 1000 elements traced on both ranks, then one that rank 1's
trace ends in (in flight) and one rank 1 no longer traces. Rank 1 calls the third all_reduce first
(async) and stops tracing before rank 0 calls it (rank 0 waits for OUT.stopped), so rank 1's record
of it is in flight at its trace's end while rank 0's completed: rank 0's time is not the slowest's.

``in_flight_at_end.py WORLD PORT OUT``; each rank writes OUT.rank<R>.
"""
import json
import os
import time

import torch
import torch.distributed as dist

import commtrace


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    for _ in range(2):
        dist.all_reduce(torch.ones(1000))
    stopped = f"{out}.stopped"
    if rank == 1:
        work = dist.all_reduce(torch.ones(1000), async_op=True)
        commtrace.stop()
        open(stopped, "w").close()
        work.wait()
    else:
        while not os.path.exists(stopped):
            time.sleep(0.005)
        dist.all_reduce(torch.ones(1000))
    dist.all_reduce(torch.ones(1000))      # rank 1: untraced
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"rank": rank}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main)
