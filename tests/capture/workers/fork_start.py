"""Worlds forked late from a traced process, one after the other.

``fork_start.py OUT P1 P2``: this process (traced, never a rank) sleeps, then forks a child
(multiprocessing's "fork" start) that makes a 1-rank gloo world on P1 (all_reduce of 3 floats);
it sleeps again and forks a second child (``os.fork``) that does the same on P2 (5 floats) and
exits with code 3. Each child's trace starts at its fork, not at this process's start.
``OUT.<i>`` (JSON), per child i: ``pid``, ``before_fork`` (this process's [monotonic, wall] ns
just before it forked the child) and ``child_first`` (the child's first [monotonic, wall] ns).
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SLEEP_S = 0.5


def now() -> list:
    return [time.monotonic_ns(), time.time_ns()]


def world(out: str, i: int, before_fork: list, port: str, n: int) -> None:
    with open(f"{out}.{i}", "w") as f:
        json.dump({"pid": os.getpid(), "before_fork": before_fork, "child_first": now()}, f)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    dist.all_reduce(torch.ones(n))
    dist.destroy_process_group()


if __name__ == "__main__":
    out, p1, p2 = sys.argv[1:4]
    time.sleep(SLEEP_S)
    p = mp.get_context("fork").Process(target=world, args=(out, 0, now(), p1, 3))
    p.start()
    p.join(60)
    assert p.exitcode == 0, p.exitcode
    time.sleep(SLEEP_S)
    before = now()
    pid = os.fork()
    if pid == 0:
        world(out, 1, before, p2, 5)
        sys.exit(3)   # through the traced program's exit: the child's trace records the code
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3, status
