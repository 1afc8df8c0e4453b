"""Process groups created by children of a traced process, and two successive worlds.

``children.py P1 P2 P3 P4``:
  * two ``mp.Process`` (fork start method) form a 2-rank world on port P1: all_reduce(3 floats);
  * two ``subprocess`` Pythons (child_sub.py) form a 2-rank world on port P2: all_reduce(5 floats);
  * then this process creates a 1-rank world on P3 (all_reduce 7 floats), destroys it,
    and creates another 1-rank world on P4 (all_reduce 9 floats).
"""
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def forked(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    dist.all_reduce(torch.ones(3))
    dist.destroy_process_group()


def one_world(port, n):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    dist.all_reduce(torch.ones(n))
    dist.destroy_process_group()


if __name__ == "__main__":
    p1, p2, p3, p4 = sys.argv[1:5]
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=forked, args=(r, p1)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    here = os.path.dirname(os.path.abspath(__file__))
    subs = [subprocess.Popen([sys.executable, os.path.join(here, "child_sub.py"), str(r), p2]) for r in range(2)]
    assert all(s.wait(60) == 0 for s in subs)
    one_world(p3, 7)
    one_world(p4, 9)
