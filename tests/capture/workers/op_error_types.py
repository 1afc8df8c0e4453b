"""Collectives that fail at the call with a typed error, each caught as the program would.

``op_error_types.py WORLD PORT OUT`` starts WORLD ranks; each writes OUT.rank<R> with the
``[op, "Type: message"]`` of each call that raised, in call order (torch before 2.5's gloo
takes the non-contiguous all_to_all_single without complaint).
"""
import json

import torch
import torch.distributed as dist


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    raised = []
    try:  # torch's c10::ValueError: Python sees ValueError
        dist.all_to_all_single(torch.zeros(2, 2), torch.ones(2, 2).t())
    except Exception as e:  # noqa: BLE001
        raised.append(["all_to_all", f"{type(e).__name__}: {e}"])
    try:  # gloo refuses it: RuntimeError
        dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(2.0))
    except Exception as e:  # noqa: BLE001
        raised.append(["all_reduce", f"{type(e).__name__}: {e}"])
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"raised": raised}, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
