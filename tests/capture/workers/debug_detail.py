"""Collectives on groups that TORCH_DISTRIBUTED_DEBUG=DETAIL wraps in torch's ProcessGroupWrapper
(it checks every op's fingerprint across ranks on a helper gloo group first), then one op the
ranks disagree on, which the wrapper reports.

``debug_detail.py WORLD PORT OUT`` starts WORLD ranks; each writes OUT.rank<R>.
"""
import json

import torch
import torch.distributed as dist


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    sub = dist.new_group(list(range(world)))
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
    dist.broadcast(t, 0, group=sub)
    dist.all_reduce(t, group=sub)
    res = {"sum": t.tolist(), "wrapped": type(sub._get_backend(torch.device("cpu"))).__name__}
    try:  # rank 0 all_reduces, the others broadcast: the wrapper's check fails on every rank
        if rank == 0:
            dist.all_reduce(torch.ones(2), group=sub)
        else:
            dist.broadcast(torch.ones(2), 0, group=sub)
        res["mismatch"] = None
    except RuntimeError as e:
        res["mismatch"] = "Collectives differ" in str(e) or "mismatch" in str(e).lower()
    dist.barrier()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump(res, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
