"""Rank 1 waits for a recv whose sender tears its group down without sending: the wait
raises (gloo: "Connection closed by peer", or the group's timeout).

``p2p_peer_gone.py WORLD PORT OUT`` spawns 2 ranks; rank 1 writes OUT.rank1 with what its wait raised.
"""
import json
from datetime import timedelta

import torch
import torch.distributed as dist


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=20))
    store = dist.distributed_c10d._get_default_store()  # outlives the group: the ranks' last word
    dist.barrier()
    if rank == 0:
        dist.destroy_process_group()  # never sends: rank 1's recv loses its peer
        store.wait(["recv_ended"], timedelta(seconds=60))
        return
    work = dist.irecv(torch.zeros(4), src=0)
    try:
        work.wait()
        raised = None
    except RuntimeError as e:
        raised = str(e)
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"raised": raised}, fh)
    store.set("recv_ended", "1")


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main)
