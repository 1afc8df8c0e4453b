"""A program that dies before any process group exists.

usage: early_faults.py keyerror [--spawn]   (--spawn: MASTER_PORT set, the ranks' rendezvous)
Rank 1 looks up a missing setting (KeyError) while parsing its configuration;
rank 0 goes on to init_process_group and waits there for rank 1 until the
launcher (mpirun, or mp.spawn with --spawn) tears it down.
"""
import datetime
import os
import sys
import tempfile
import time

CONFIG = {"batch_size": 8}


def worker(rank: int) -> None:
    if rank == 1:
        lr = CONFIG["lr"]  # KEYERROR
        print(lr)
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))


def spawned(index: int, port: int) -> None:
    # Process 1 fails only once process 0 runs: mp.spawn then tears down a process that has
    # started (and knows its index), not one still importing, whatever the machine's load.
    started = os.path.join(tempfile.gettempdir(), f"early_faults.{port}.started")
    if index == 0:
        open(started, "w").close()
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(started) and time.monotonic() < deadline:
            time.sleep(0.01)
        if os.path.exists(started):
            os.unlink(started)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    worker(index)


if __name__ == "__main__":
    if "--spawn" in sys.argv:
        import torch.multiprocessing as mp
        mp.spawn(spawned, args=(int(os.environ["MASTER_PORT"]),), nprocs=2)
    else:
        worker(int(os.environ["RANK"]))
