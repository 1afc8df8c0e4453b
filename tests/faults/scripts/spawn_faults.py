"""Fault-injection workload: 2 gloo ranks via torch.multiprocessing.spawn.

usage: MASTER_PORT=PORT spawn_faults.py MODE [STEPS]
MODE: clean | usr1 | raise | sigkill | skip | sizes | sites (clean; odd steps call from a
second line, so the trace holds two sigs)
Every step is one all_reduce of 16 floats at the line marked STEP; the fault
hits rank 1 at step 3 (so group seq 1..3 completed everywhere, seq 4 is the
collective that goes wrong).
"""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from on_disk import wait_for, wait_for_dump

FAULT_STEP = 3


def worker(rank, world, mode, steps):
    os.environ["MASTER_ADDR"] = "127.0.0.1"   # MASTER_PORT: the test's
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    t = torch.ones(16)
    for step in range(steps):
        if rank == 1 and step == FAULT_STEP:
            if mode in ("raise", "sigkill"):
                # Rank 0 waits in seq 4, its in-flight record on disk (it stays there if rank 0
                # then crashes); and everything so far is flushed.
                wait_for(1, 3)
                wait_for(0, 3, in_flight=4)
            if mode == "raise":
                raise RuntimeError("injected failure at step 3")
            if mode == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "skip":
                continue
        if mode == "usr1" and rank == 0 and step == FAULT_STEP:
            os.kill(os.getpid(), signal.SIGUSR1)  # dump state, keep going
            wait_for_dump("SIGUSR1", rank)   # written by commtrace's signal thread, while this one is here
        if mode == "sizes" and step == FAULT_STEP:
            if rank == 0:
                # Rank 1 waits in seq 4 (on disk as in flight); then rank 0 receives its 32
                # floats for 16 and gloo aborts it (SIGABRT) at once, with seq 4 on no disk
                # unless the fatal signal closes the trace.
                wait_for(0, 3)
                wait_for(1, 3, in_flight=4)
            x = torch.ones(16 if rank == 0 else 32)
            dist.all_reduce(x)  # SIZES
            continue
        if mode == "sites" and step % 2:
            dist.all_reduce(t)  # SITE B
            continue
        dist.all_reduce(t)  # STEP
    if mode == "skip" and rank == 1:
        time.sleep(120)  # busy elsewhere while rank 0 waits in its 6th all_reduce
    dist.destroy_process_group()


if __name__ == "__main__":
    mode = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    mp.spawn(worker, args=(2, mode, steps), nprocs=2)
