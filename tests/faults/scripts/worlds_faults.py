"""Several worlds one after another in one traced run, as a test suite makes them: each
world is 2 fresh ranks (torch.multiprocessing.spawn: new processes, new init_process_group).

usage: worlds_faults.py MODE PORT SECOND_PORT (each world's rendezvous)
MODE (what rank 1 of the first world does after its 2nd all_reduce): clean | exit
(``os._exit(7)``) | hang (sleeps: rank 0 waits in its 3rd all_reduce until the hang watchdog
aborts it). The second world, started after the first ended however it ended, is clean
and ends with a broadcast, an op the first world's ranks never called; except in MODE
kill-second, where the first world is clean and the second world's rank 1 SIGKILLs itself
after its 2nd all_reduce; and except in MODE p2p-second, where the first world is clean and,
after the second world's collectives, its rank 0 sends to rank 1, which never receives (it
sleeps): the send stays in flight until the hang watchdog aborts rank 0.
"""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from on_disk import wait_for


def first_world(rank, port, mode):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    t = torch.ones(4)
    for _ in range(2):
        dist.all_reduce(t)  # WORLD1
    if rank == 1 and mode == "exit":
        wait_for(1, 2)
        wait_for(0, 2, in_flight=3)     # rank 0's 3rd all_reduce is on disk, in flight
        os._exit(7)
    if rank == 1 and mode == "hang":
        time.sleep(120)
    dist.all_reduce(t)  # WORLD1 THIRD
    dist.destroy_process_group()


def second_world(rank, port, mode):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.ones(8)
    for i in range(4):
        if rank == 1 and i == 2 and mode == "kill-second":
            wait_for(1, 2)
            wait_for(0, 2, in_flight=3)     # rank 0's 3rd all_reduce is on disk, in flight
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)  # WORLD2
    dist.broadcast(t, src=0)  # WORLD2 LAST
    if mode == "p2p-second":
        if rank == 0:
            dist.send(t, dst=1)  # WORLD2 SEND
        else:
            time.sleep(120)
    dist.destroy_process_group()


if __name__ == "__main__":
    mode = sys.argv[1]
    failed = None
    try:
        mp.spawn(first_world, args=(int(sys.argv[2]), mode), nprocs=2)
    except Exception as e:  # mp.spawn's ProcessExitedException: a test suite goes on to the next test
        failed = e
    mp.spawn(second_world, args=(int(sys.argv[3]), mode), nprocs=2)
    if failed is not None:
        print(f"first world failed: {failed}", file=sys.stderr)
        sys.exit(1)
