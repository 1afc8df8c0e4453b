"""The one place where commtrace imports mpi4py (and therefore calls MPI_Init).

Why one place: the MPI thread level is fixed by the first ``MPI_Init_thread``
and mpi4py performs it on ``from mpi4py import MPI``. The launcher (clock sync,
rendezvous broadcast) and the mpi backend must agree on it, so both go through
:func:`world`.

Thread level: ``MPI_THREAD_MULTIPLE``. The mpi backend's progress thread tests
outstanding requests while the main thread starts new ones, and user code or
the tracer may call mpi4py from other threads. Open MPI 5 supports it and the
measured cost on a 1-element Allreduce is ~0.1 us (docs/mpi-backend.md).
"""
from __future__ import annotations

import importlib.util
import os
import sys

THREAD_LEVEL = "multiple"

# Environment variables that MPI launchers set in every process they start.
_LAUNCH_MARKERS = (
    "OMPI_COMM_WORLD_SIZE",   # Open MPI mpirun/prterun
    "PMIX_RANK",              # any PMIx launcher (Open MPI 5, srun --mpi=pmix)
    "PMI_SIZE",               # MPICH hydra, Intel MPI, srun --mpi=pmi2
    "PMI_RANK",
    "MPI_LOCALNRANKS",        # MPICH hydra
    "MV2_COMM_WORLD_SIZE",    # MVAPICH2
)

# MCA defaults applied only when the user did not choose: the ring algorithm
# makes a 4 MB in-place MPI_Iallreduce as fast as the blocking MPI_Allreduce
# (libnbc's default choice was 2.8x slower here, see docs/mpi-backend.md).
_OMPI_DEFAULTS = {
    "OMPI_MCA_coll_libnbc_iallreduce_algorithm": "ring",
}

_world = None


def in_mpi_launch() -> bool:
    """True when an MPI launcher started this process."""
    return any(k in os.environ for k in _LAUNCH_MARKERS)


def mpi_available() -> bool:
    """mpi4py is importable and this process is part of an MPI job.

    Does not initialize MPI. A process not started by mpirun could still
    MPI_Init as a singleton; we do not count that as available, so that plain
    ``python script.py`` never silently becomes a 1-rank MPI job.
    """
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None:
        try:
            if mod.Is_initialized() and not mod.Is_finalized():
                return True
        except Exception:
            pass
    if importlib.util.find_spec("mpi4py") is None:
        return False
    return in_mpi_launch()


def is_initialized() -> bool:
    mod = sys.modules.get("mpi4py.MPI")
    return bool(mod is not None and mod.Is_initialized() and not mod.Is_finalized())


def _import_mpi(initialize: bool):
    """Import mpi4py.MPI with commtrace's settings (only the first import applies them)."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        # Must be set before the import below: that import calls MPI_Init_thread
        # (unless ``initialize`` is False: then world() initializes later).
        mpi4py.rc.thread_level = THREAD_LEVEL
        # MPI errors must become Python exceptions, never aborts or hangs.
        mpi4py.rc.errors = "exception"
        mpi4py.rc.initialize = initialize
        # Finalize at exit whoever initializes (its default follows ``initialize``,
        # and a rank that exits without MPI_Finalize makes mpirun fail the job).
        mpi4py.rc.finalize = True
        for k, v in _OMPI_DEFAULTS.items():
            os.environ.setdefault(k, v)
    from mpi4py import MPI

    return MPI


def library_version() -> str:
    """MPI_Get_library_version of the MPI library mpi4py uses.

    Does not initialize MPI (the call is allowed before MPI_Init), so a build
    step can ask outside an MPI job; a later world() initializes as usual.
    """
    return _import_mpi(initialize=False).Get_library_version().rstrip("\x00").strip()


def world():
    """Initialize MPI (once, at THREAD_LEVEL) and return mpi4py's COMM_WORLD."""
    global _world
    if _world is not None:
        return _world
    MPI = _import_mpi(initialize=True)

    if not MPI.Is_initialized():
        # Someone imported mpi4py with rc.initialize=False: initialize now.
        MPI.Init_thread({"single": MPI.THREAD_SINGLE, "funneled": MPI.THREAD_FUNNELED,
                         "serialized": MPI.THREAD_SERIALIZED,
                         "multiple": MPI.THREAD_MULTIPLE}[THREAD_LEVEL])
    _world = MPI.COMM_WORLD
    return _world


def thread_level() -> int:
    """The thread level MPI actually provides (an MPI.THREAD_* constant)."""
    world()
    from mpi4py import MPI

    return MPI.Query_thread()


def mpi_module():
    """mpi4py.MPI, initialized through :func:`world`."""
    world()
    from mpi4py import MPI

    return MPI
