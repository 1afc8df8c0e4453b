"""The ``__main__`` of a worker that runs under a launcher or starts its own ranks.

Under a launcher (``RANK`` set: mpirun or torchrun through ``commtrace run``) the process is
one rank; alone (``worker.py WORLD PORT OUT``) it spawns WORLD ranks rendezvousing on
127.0.0.1:PORT. Either way ``main(rank, world, out)``, OUT being the last argument.
"""
import os
import sys


def run_ranks(main) -> None:
    out = sys.argv[-1]
    if "RANK" in os.environ:
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), out)
    else:
        import torch.multiprocessing as mp
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = sys.argv[2]
        mp.spawn(main, args=(int(sys.argv[1]), out), nprocs=int(sys.argv[1]))
