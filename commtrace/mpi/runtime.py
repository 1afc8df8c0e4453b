"""The process's MPI, shared by every mpi group: mpi4py's module, the progress
thread and the SUM reduction of each common dtype. Initialized once, by the
first group (``init()``); read by the groups' ops (collectives.py, p2p.py) and
their Works (work.py)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from .. import mpienv
from . import dtypes
from .progress import Progress

MPI = None
IN_PLACE = None
progress = None   # the progress thread; None where MPI may not be called from a second thread
SUM_OPS: dict = {}  # dtype -> (MPI.Op, avg) for SUM, the common case


def init():
    """mpi4py.MPI, after setting up the rest of this module the first time."""
    global MPI, progress, IN_PLACE
    if MPI is None:
        MPI = mpienv.mpi_module()
        IN_PLACE = MPI.IN_PLACE
        progress = Progress(MPI)
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            # MPI was initialized elsewhere at a lower level: no second thread may
            # call MPI. Collectives then run blocking; p2p requests are completed by
            # whoever waits on them.
            progress = None
        for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                   torch.int64):
            SUM_OPS[dt] = dtypes.reduce_op(dist.ReduceOp.SUM, dt)
    return MPI
