"""PyTorch Lightning on CPU, gloo, 2 ranks.

usage: lightning_fit.py OUT MODE STRATEGY

MODE ``auto``: automatic optimization with ``accumulate_grad_batches=2`` over 4
batches per rank (2 optimizer steps of 2 micro-batches; Lightning runs the last
micro-batch of each step inside ``optimizer.step(closure)`` and the others under
DDP's ``no_sync()``). MODE ``manual``: manual optimization, 4 batches per rank,
``manual_backward`` and ``optimizer.step()`` inside ``training_step`` (which
Lightning runs inside the DDP forward): 4 optimizer steps.
STRATEGY ``ddp`` (under torchrun) or ``ddp_spawn`` (Lightning starts the ranks).
"""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as pl

from common import data, finish, write_losses

BATCHES = 4


class Model(pl.LightningModule):
    def __init__(self, out: str, manual: bool):
        super().__init__()
        self.out, self.losses = out, []
        self.automatic_optimization = not manual
        torch.manual_seed(0)
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        return loss

    def on_train_end(self):
        write_losses(self.out, self.global_rank, self.losses)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out: str, mode: str, strategy: str) -> None:
    x, y = data()
    trainer = pl.Trainer(accelerator="cpu", devices=2, num_nodes=1, strategy=strategy, max_epochs=1,
                         limit_train_batches=BATCHES, accumulate_grad_batches=2 if mode == "auto" else 1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(Model(out, mode == "manual"), DataLoader(TensorDataset(x, y), batch_size=4))
    finish()


if __name__ == "__main__":
    main(*sys.argv[1:4])
