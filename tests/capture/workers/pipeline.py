"""A 2-stage pipeline (torch.distributed.pipelining, GPipe, 4 micro-batches) on gloo, 3 steps;
with PIPELINE_SCHEDULE set, that schedule (an interleaved one: 2 stages per rank).

``pipeline.py WORLD PORT OUT`` spawns WORLD ranks (or runs as one rank under a launcher).
Each rank writes OUT.rank<R>: its stage and the losses the last stage saw.
"""
import inspect
import json
import os

import torch
import torch.distributed as dist

STEPS, MICRO, BATCH, DIM = 3, 4, 8, 32
MULTI_STAGE = ("ScheduleInterleaved1F1B", "ScheduleLoopedBFS")  # two stages per rank


def main(rank, world, out):
    from torch.distributed import pipelining
    from torch.distributed.pipelining import PipelineStage
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(0)
    schedule_name = os.environ.get("PIPELINE_SCHEDULE", "ScheduleGPipe")
    per_rank = 2 if schedule_name in MULTI_STAGE else 1  # stages rank, rank + world, ...
    n = world * per_rank
    layers = [torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.ReLU()) for _ in range(n)]
    ids = [rank + k * world for k in range(per_rank)]
    kw = {}
    arg = inspect.signature(PipelineStage).parameters.get("input_args")
    if arg is not None and arg.default is inspect.Parameter.empty:  # older torch: no shape inference
        kw = {"input_args": (torch.empty(BATCH // MICRO, DIM),), "output_args": (torch.empty(BATCH // MICRO, DIM),)}
    stages = [PipelineStage(layers[i], i, n, torch.device("cpu"), **kw) for i in ids]
    losses = []

    def loss_fn(output, target):
        loss = torch.nn.functional.mse_loss(output, target)
        losses.append(float(loss.detach()))
        return loss

    schedule = getattr(pipelining, schedule_name)(stages if per_rank > 1 else stages[0], n_microbatches=MICRO,
                                                   loss_fn=loss_fn)
    opt = torch.optim.SGD([p for i in ids for p in layers[i].parameters()], lr=0.01)
    x, y = torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)
    first, last = 0 in ids, n - 1 in ids
    for _ in range(STEPS):
        opt.zero_grad()
        args = (x,) if first else ()
        schedule.step(*args, **({"target": y} if last else {}))
        opt.step()
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"rank": rank, "losses": losses}, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main)
