"""Two threads of one process step their own optimizers at overlapping times (a parameter
server stepping for several trainers): thread A's step begins, then B's, A's ends while B's
runs, and B's all_reduce comes after that. 1 rank, gloo.

``threads_stepping.py WORLD PORT OUT``: rank r writes OUT.rank<r> with the steps' sums.
"""
import json
import threading

import torch
import torch.distributed as dist


class StepA(torch.optim.SGD):
    pass


class StepB(torch.optim.SGD):
    pass


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    a_in, b_in, a_done = threading.Event(), threading.Event(), threading.Event()
    sums = {}

    def stepped(cls, before, after):
        p = torch.nn.Parameter(torch.ones(2))
        p.grad = torch.ones(2)
        opt = cls([p], lr=0.1)
        orig = torch.optim.SGD.step

        def step(self, closure=None):   # inside the step hooks: the order is forced here
            before()
            t = torch.ones(1)
            dist.all_reduce(t)
            sums[cls.__name__] = float(t)
            after()
            return orig(self, closure)
        cls.step = step
        opt = cls([p], lr=0.1)          # step wrapped with the step hooks when the class is first built
        opt.step()

    def run_a():
        stepped(StepA, lambda: a_in.set(), lambda: b_in.wait(30))
        a_done.set()

    def run_b():
        a_in.wait(30)
        stepped(StepB, lambda: (b_in.set(), a_done.wait(30)), lambda: None)

    threads = [threading.Thread(target=run_a, name="A"), threading.Thread(target=run_b, name="B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump(sums, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
