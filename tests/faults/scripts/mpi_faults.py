"""Fault-injection workload for ``mpirun -n 2 python -m commtrace run mpi_faults.py MODE``.

commtrace run derives RANK/WORLD_SIZE from Open MPI's env and sets MASTER_ADDR/PORT;
the ranks use gloo. MODE: clean | exit (rank 1 os._exit(7) at step 3) |
raise (rank 1 raises at step 3). Open MPI then tears down the other rank.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

from on_disk import wait_for

FAULT_STEP = 3


def main(mode: str, steps: int = 6) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    t = torch.ones(16)
    for step in range(steps):
        if rank == 1 and step == FAULT_STEP and mode != "clean":
            wait_for(1, 3)
            wait_for(0, 3, in_flight=4)  # rank 0 waits in seq 4, on disk; all earlier ops are flushed
            if mode == "exit":
                os._exit(7)
            raise RuntimeError("injected failure at step 3 (mpi)")
        dist.all_reduce(t)  # STEP
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
