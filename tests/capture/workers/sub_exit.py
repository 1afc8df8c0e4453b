"""Ranks started as plain subprocesses (traced by the run's boot sitecustomize, as torchrun's
are: neither ``commtrace run`` nor multiprocessing sees how they end): how each ended must reach
its trace.

``sub_exit.py PORT``: starts 3 ranks of a gloo world (``sub_exit.py PORT RANK``); each
all_reduces once, then rank 0 leaves with ``sys.exit(10)``, rank 1 catches a ``sys.exit(5)`` of
its own and returns from its script, rank 2 raises KeyboardInterrupt. Prints their exit codes.
"""
import subprocess
import sys


def give_up():
    try:
        sys.exit(5)
    except SystemExit:
        pass


def rank_main(port, rank):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=3)
    dist.all_reduce(torch.ones(3))
    dist.destroy_process_group()
    if rank == 0:
        sys.exit(10)
    if rank == 1:
        give_up()
        return
    raise KeyboardInterrupt


if __name__ == "__main__":
    if len(sys.argv) > 2:
        rank_main(sys.argv[1], int(sys.argv[2]))
    else:
        procs = [subprocess.Popen([sys.executable, __file__, sys.argv[1], str(r)]) for r in range(3)]
        print("exit codes", [p.wait(60) for p in procs])
