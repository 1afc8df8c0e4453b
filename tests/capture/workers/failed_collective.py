"""2 gloo ranks: four float32 all_reduces of 1000 elements, and between them one that gloo rejects
on both ranks after the call reached the group (uint16: "Invalid scalar type"): a failed collective.

``failed_collective.py WORLD PORT OUT``; each rank writes OUT.rank<R> with what the failed one raised.
"""
import json

import torch
import torch.distributed as dist


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    for _ in range(2):
        dist.all_reduce(torch.ones(1000))
    try:
        dist.all_reduce(torch.ones(1000, dtype=torch.uint16))
        raised = None
    except RuntimeError as e:
        raised = str(e)
    for _ in range(2):
        dist.all_reduce(torch.ones(1000))
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"raised": raised}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main)
