"""DDP training that checkpoints with torch.distributed.checkpoint: ``get_state_dict``, a
``dcp.save``, a ``dcp.async_save`` (its collectives run in DCP's executor thread while the
main thread is inside ``async_save``), ``dcp.load`` and ``set_state_dict``; then an object
collective of the program's own. In between, a program thread opens a ``commtrace.region``
while the main thread is inside one. 2 ranks, gloo.

``checkpoint.py WORLD PORT OUT``: rank r writes OUT.rank<r> with the ranks' loaded step.
"""
import json
import os
import threading

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

import commtrace


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    where = os.path.dirname(out)
    for step in range(1, 4):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        if step == 1:
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd, "step": step}, checkpoint_id=os.path.join(where, "ck"))
        if step == 2:
            msd, osd = get_state_dict(model, opt)
            dcp.async_save({"model": msd, "optim": osd, "step": step},
                           checkpoint_id=os.path.join(where, "ck_async")).result()
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "step": 0}
    dcp.load(state, checkpoint_id=os.path.join(where, "ck"))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    with commtrace.region("main"):
        def side():
            with commtrace.region("side"):
                dist.all_reduce(torch.ones(1))
        t = threading.Thread(target=side, name="side")
        t.start()
        t.join()
        dist.all_reduce(torch.ones(1))
    steps = [None] * world
    dist.all_gather_object(steps, state["step"])
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump(steps, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
