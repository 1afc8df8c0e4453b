"""A 2-stage pipeline (torch.distributed.pipelining, GPipe, 4 micro-batches) on gloo, 3 steps.

``pipeline.py WORLD PORT OUT`` spawns WORLD ranks (or runs as one rank under a launcher).
Each rank writes OUT.rank<R>: its stage and the losses the last stage saw.
"""
import inspect
import json

import torch
import torch.distributed as dist

STEPS, MICRO, BATCH, DIM = 3, 4, 8, 32


def main(rank, world, out):
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.ReLU()) for _ in range(world)]
    stage_mod = layers[rank]
    kw = {}
    arg = inspect.signature(PipelineStage).parameters.get("input_args")
    if arg is not None and arg.default is inspect.Parameter.empty:  # older torch: no shape inference
        kw = {"input_args": (torch.empty(BATCH // MICRO, DIM),), "output_args": (torch.empty(BATCH // MICRO, DIM),)}
    stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"), **kw)
    losses = []

    def loss_fn(output, target):
        loss = torch.nn.functional.mse_loss(output, target)
        losses.append(float(loss.detach()))
        return loss

    schedule = ScheduleGPipe(stage, n_microbatches=MICRO, loss_fn=loss_fn)
    opt = torch.optim.SGD(stage_mod.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)
    for _ in range(STEPS):
        opt.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=y)
        else:
            schedule.step()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"rank": rank, "losses": losses}, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main)
