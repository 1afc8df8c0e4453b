"""A forked child makes its world before its traced parent makes its own.

``fork_world_first.py P1 P2``: this process (traced from its start) forks a child (``os.fork``)
that makes a 1-rank gloo world on P1 (all_reduce of 3 floats) and exits with code 3; once the
child has ended, this process makes its own 1-rank world on P2 (5 floats). The child's world is
made first, though this process started tracing first.
"""
import os
import sys

import torch
import torch.distributed as dist


def one_world(port: str, n: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    dist.all_reduce(torch.ones(n))
    dist.destroy_process_group()


if __name__ == "__main__":
    p1, p2 = sys.argv[1:3]
    pid = os.fork()
    if pid == 0:
        one_world(p1, 3)
        sys.exit(3)   # through the traced program's exit: the child's trace records the code
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3, status
    one_world(p2, 5)
