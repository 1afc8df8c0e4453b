"""A one-rank job that forks a multiprocessing child, terminates it (SIGTERM, as Pool.terminate
and a DataLoader's shutdown do), then goes on: five seconds, an all_reduce, "parent alive".

usage: forked_child_terminated.py PORT
"""
import multiprocessing
import os
import sys
import time

import torch
import torch.distributed as dist

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
dist.all_reduce(torch.ones(4))


def child(ready):
    ready.set()
    time.sleep(60)


if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=child, args=(ready,))
    proc.start()
    ready.wait()
    proc.terminate()
    proc.join()
    print("child ended by signal", -proc.exitcode, flush=True)
    time.sleep(5)   # the parent goes on (what ended it before did so within 0.2 s)
    dist.all_reduce(torch.ones(4))
    print("parent alive", flush=True)
