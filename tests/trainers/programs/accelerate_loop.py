"""Hugging Face accelerate on CPU, gloo, 2 ranks (torchrun).

usage: accelerate_loop.py OUT

``gradient_accumulation_steps=2`` over 4 batches per rank: 2 optimizer steps of
2 micro-batches (accelerate runs the first under DDP's ``no_sync()`` and skips
the wrapped optimizer's step there).
"""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator

from common import data, finish, write_losses


def main(out: str) -> None:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data(16)
    model, opt, loader = acc.prepare(model, opt, DataLoader(TensorDataset(x, y), batch_size=2))
    losses = []
    for xb, yb in loader:
        with acc.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    write_losses(out, acc.process_index, losses)
    acc.end_training()
    finish()


if __name__ == "__main__":
    main(sys.argv[1])
