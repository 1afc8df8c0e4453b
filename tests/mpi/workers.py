"""Runs under mpirun: several workers of this folder, one after the other, in each rank's process.

    workers.py PORT,PORT,... WORKER [ARGS...] [-- WORKER [ARGS...]]...

For tests whose subject is what a worker checks, not how it was launched: each launch is one
interpreter per rank importing torch (~2 s of CPU each). Every worker makes and destroys its own
process groups. Each rank prints ``workers: rank R: WORKER ARGS exit CODE`` after each worker
(a worker's sys.exit is caught: the next one still runs), so a test reads its own worker's exit
code on every rank besides its summary line. Each worker gets its own MASTER_PORT (one of PORT,...),
and all ranks finish a worker before any starts the next (an MPI barrier): a rank must not reach
the store of the previous worker's gloo world, still served by its peer (one port and no barrier
hung: ranks in the next worker's gloo init, in ``Pair::connect``). Any other exception prints its
traceback and aborts the job (MPI_Abort): the launch fails at once, with the output so far.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback

from commtrace import mpienv

HERE = os.path.dirname(os.path.abspath(__file__))


def jobs(argv: list[str]) -> list[list[str]]:
    out = [[]]
    for a in argv:
        if a == "--":
            out.append([])
        else:
            out[-1].append(a)
    return [job for job in out if job]


comm = mpienv.world()
rank = comm.Get_rank()
ports = sys.argv[1].split(",")
todo = jobs(sys.argv[2:])
if len(ports) != len(todo):
    raise SystemExit(f"workers.py: {len(todo)} workers, {len(ports)} ports")
for port, job in zip(ports, todo):
    comm.Barrier()
    os.environ["MASTER_PORT"] = port
    sys.argv = [os.path.join(HERE, job[0]), *job[1:]]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        # Its peers may wait in one of its collectives: end the whole job now (before, the
        # ranks left waited out the test's timeout, 120 s a job, after "Abort is in progress").
        traceback.print_exc()
        print(f"workers: rank {rank}: {' '.join(job)} raised", flush=True)
        sys.stderr.flush()
        comm.Abort(1)
    print(f"workers: rank {rank}: {' '.join(job)} exit {code}", flush=True)
