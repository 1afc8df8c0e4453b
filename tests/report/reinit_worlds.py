"""One pair of processes that makes two worlds one after another (init, destroy, init again, as
a test suite or an elastic retry in one process does): each world has its own group 0 and
sequence numbers 1, 2, ... (test fixture of tests/report/test_worlds.py).

usage: reinit_worlds.py PORT SECOND_PORT (each world's rendezvous)
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, ports):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    for which, port in enumerate(ports):
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=2)
        for _ in range(2 + which):
            dist.all_reduce(torch.ones(4))
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(rank_main, args=((int(sys.argv[1]), int(sys.argv[2])),), nprocs=2, start_method="fork")
