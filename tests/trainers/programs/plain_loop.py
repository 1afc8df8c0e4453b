"""A hand-written DDP loop, gloo, 2 ranks (torchrun): gradient accumulation with a
closure-driven optimizer step.

usage: plain_loop.py OUT

2 optimizer steps of 2 micro-batches each: the first under ``no_sync()``; the
second runs inside ``optimizer.step(closure)`` (its forward and backward happen
inside the optimizer step, as under Lightning's automatic optimization).
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from common import data, finish, write_losses

STEPS, ACCUMULATE, BATCH = 2, 2, 4


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data()
    losses = []
    batches = iter(range(rank * BATCH, len(x), 2 * BATCH))

    def micro_batch():
        i = next(batches)
        loss = torch.nn.functional.mse_loss(model(x[i:i + BATCH]), y[i:i + BATCH]) / ACCUMULATE
        loss.backward()
        losses.append(loss.item())
        return loss

    for _ in range(STEPS):
        opt.zero_grad()
        with model.no_sync():
            for _ in range(ACCUMULATE - 1):
                micro_batch()
        opt.step(micro_batch)
    write_losses(out, rank, losses)
    finish()


if __name__ == "__main__":
    main(sys.argv[1])
