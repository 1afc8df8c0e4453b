"""Processes that are ranks of two worlds, with different ranks in each (a program that
re-creates its default group with a new rank order, as an elastic job does after a restart).

usage: two_worlds_two_ranks.py exit PORT_A PORT_B -- mp.spawn 3 processes; world A (2 ranks):
processes 0 and 1 as ranks 0 and 1, one all_reduce; then world B (3 ranks): processes 0, 1, 2
as ranks 2, 0, 1, one all_reduce; process 2 (rank 1 of B) exits with code 7 before B's second.
"""
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RANK_IN_B = {0: 2, 1: 0, 2: 1}


def main(i, port_a, port_b):
    if i < 2:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port_a}", rank=i, world_size=2)
        dist.all_reduce(torch.ones(2))
        dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port_b}", rank=RANK_IN_B[i], world_size=3)
    dist.all_reduce(torch.ones(3))
    dist.barrier()
    if i == 2:
        sys.exit(7)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=tuple(sys.argv[2:4]), nprocs=3)
