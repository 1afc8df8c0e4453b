"""A 2-stage pipeline (torch.distributed.pipelining, GPipe, 4 micro-batches) on gloo, 3 steps;
with PIPELINE_SCHEDULE set (comma-separated names), each of those schedules that this torch has,
one after another, 3 steps each, on new stages: a multi-stage one runs 2 stages per rank;
with PIPELINE_EVAL set, each schedule's ``eval()`` (where torch has it) between its steps 1 and 2.

``pipeline.py WORLD PORT OUT`` starts WORLD ranks (or runs as one rank under a launcher).
Each rank writes OUT.rank<R>: the schedules run and the losses the last stage saw.
"""
import inspect
import json
import os

import torch
import torch.distributed as dist

STEPS, MICRO, BATCH, DIM = 3, 4, 8, 32
# two stages per rank: rank and rank + world, or in a V (rank and 2 * world - 1 - rank)
MULTI_STAGE = ("ScheduleInterleaved1F1B", "ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble")
V_SHAPE = ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")


def main(rank, world, out):
    from torch.distributed import pipelining
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(0)
    names = os.environ.get("PIPELINE_SCHEDULE", "ScheduleGPipe").split(",")
    ran = [name for name in names if hasattr(pipelining, name)]
    losses = []
    evaluated = [train(rank, world, name, losses) for name in ran]
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"rank": rank, "schedules": ran, "losses": losses, "evaluated": any(evaluated)}, fh)


def train(rank, world, schedule_name, losses):
    from torch.distributed import pipelining
    from torch.distributed.pipelining import PipelineStage

    class CountingStage(PipelineStage):
        """Counts the bytes it sends, reading each op's tensor as it builds them (as programs do)."""
        sent = 0

        def get_fwd_send_ops(self, *args, **kwargs):
            ops = super().get_fwd_send_ops(*args, **kwargs)
            self.sent += sum(op.tensor.numel() * op.tensor.element_size() for op in ops)
            return ops
    per_rank = 2 if schedule_name in MULTI_STAGE + V_SHAPE else 1
    n = world * per_rank
    layers = [torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.ReLU()) for _ in range(n)]
    ids = [rank, n - 1 - rank] if schedule_name in V_SHAPE else [rank + k * world for k in range(per_rank)]
    kw = {}
    arg = inspect.signature(PipelineStage).parameters.get("input_args")
    if arg is not None and arg.default is inspect.Parameter.empty:  # older torch: no shape inference
        kw = {"input_args": (torch.empty(BATCH // MICRO, DIM),), "output_args": (torch.empty(BATCH // MICRO, DIM),)}
    stages = [CountingStage(layers[i], i, n, torch.device("cpu"), **kw) for i in ids]

    def loss_fn(output, target):
        loss = torch.nn.functional.mse_loss(output, target)
        losses.append(float(loss.detach()))
        return loss

    schedule = getattr(pipelining, schedule_name)(stages if per_rank > 1 else stages[0], n_microbatches=MICRO,
                                                   loss_fn=loss_fn)
    opt = torch.optim.SGD([p for i in ids for p in layers[i].parameters()], lr=0.01)
    x, y = torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)
    first, last = 0 in ids, n - 1 in ids
    evaluate = bool(os.environ.get("PIPELINE_EVAL")) and hasattr(schedule, "eval")
    for i in range(STEPS):
        opt.zero_grad()
        args = (x,) if first else ()
        schedule.step(*args, **({"target": y} if last else {}))
        opt.step()
        if i == 0 and evaluate:   # an evaluation (forwards only) between steps 1 and 2
            schedule.eval(*args, **({"target": y} if last else {}))
    return evaluate


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
