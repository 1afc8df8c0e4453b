"""DDP trained by the main thread while a thread of the program all_reduces a metric (and
all_gathers the ranks' names as objects) on a group of its own, once in each forward and once in each backward (hooks hold the main thread
until the metric is reduced); then a second DDP model trained from start to end in a thread
(as Ray Train runs a training function). 2 ranks, gloo.

``side_thread.py WORLD PORT OUT``: rank r writes OUT.rank<r> with the metrics it reduced.
"""
import json
import threading

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    metrics_group = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    asked, answered = threading.Semaphore(0), threading.Semaphore(0)
    reduced = []

    def reduce_metrics():
        while True:
            asked.acquire()
            if len(reduced) == 2 * STEPS:
                return
            t = torch.tensor([float(rank + 1)])
            dist.all_reduce(t, group=metrics_group)
            names = [None] * world  # an object collective: a scope of its own (api, detail)
            dist.all_gather_object(names, f"rank{rank}", group=metrics_group)
            reduced.append(float(t))
            answered.release()

    def metric_now(*_):  # the main thread waits inside forward / backward while the metric is reduced
        asked.release()
        answered.acquire()

    side = threading.Thread(target=reduce_metrics, name="metrics")
    side.start()
    net[0].register_forward_hook(metric_now)
    for _ in range(STEPS):
        y = model(torch.randn(4, 8))
        y.register_hook(metric_now)
        y.sum().backward()
        opt.step()
        opt.zero_grad()
    asked.release()
    side.join()

    def train_in_thread():
        second = DDP(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)))
        second(torch.randn(4, 8)).sum().backward()

    trainer = threading.Thread(target=train_in_thread, name="trainer")
    trainer.start()
    trainer.join()
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump(reduced, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
