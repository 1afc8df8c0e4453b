"""The ``__main__`` of a worker that runs under a launcher or starts its own ranks.

Under a launcher (``RANK`` set: mpirun or torchrun through ``commtrace run``) the process is
one rank; alone (``worker.py WORLD PORT OUT``) it starts WORLD ranks rendezvousing on
127.0.0.1:PORT. Either way ``main(rank, world, out)``, OUT being the last argument.

How the ranks start (``start``): "spawn", a new interpreter per rank that imports torch again
(~2 s of CPU each), where how a spawned rank starts or ends is under test (all_ops.py,
in_flight_at_end.py, the p2p peers that die); "fork" from this process, which has imported
torch already, where only what the ranks do is. Workers that start their ranks themselves
fork them for the same reason (parallel.py, ddp.py, ...); commtrace in spawned ranks is what
tests/report/spawn_ddp.py, all_ops.py and the examples run. Not where when a rank started
matters: a forked process's trace keeps its parent's start time (TraceSink.child, as a rank's
own forked children should), so tests/report/two_worlds.py's second world, forked, looked as
old as its first (8 of test_worlds.py's 17 tests failed); it spawns.
"""
import os
import sys


def run_ranks(main, start: str = "spawn") -> None:
    out = sys.argv[-1]
    if "RANK" in os.environ:
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), out)
    else:
        import torch.multiprocessing as mp
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = sys.argv[2]
        mp.start_processes(main, args=(int(sys.argv[1]), out), nprocs=int(sys.argv[1]), start_method=start)
