"""The Hugging Face Trainer on CPU, gloo, 2 ranks (torchrun), on a tiny GPT-2
built here from a config (no downloads).

usage: hf_trainer.py OUT

``gradient_accumulation_steps=2``, ``max_steps=2``, one sequence per micro-batch:
2 optimizer steps of 2 micro-batches per rank.
"""
import os
import sys

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from common import finish, write_losses  # noqa: E402


class Recording(Trainer):
    """Keeps the loss of every micro-batch."""

    losses: list = []

    def compute_loss(self, model, inputs, *args, **kwargs):
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        value = loss[0] if isinstance(loss, tuple) else loss
        self.losses.append(value.item())
        return loss


def main(out: str) -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2))
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 32, (16, 8), generator=g)]
    args = TrainingArguments(output_dir=os.path.dirname(os.path.abspath(out)) or ".", use_cpu=True,
                             per_device_train_batch_size=1, gradient_accumulation_steps=2, max_steps=2,
                             report_to="none", save_strategy="no", logging_strategy="no",
                             dataloader_num_workers=0, disable_tqdm=True, seed=0, learning_rate=1e-2,
                             ddp_backend="gloo", ddp_find_unused_parameters=False)
    trainer = Recording(model=model, args=args, train_dataset=rows)
    trainer.train()
    write_losses(out, trainer.args.process_index, trainer.losses)
    finish()


if __name__ == "__main__":
    main(sys.argv[1])
