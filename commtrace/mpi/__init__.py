"""``init_process_group("mpi")`` on torch wheels built without MPI.

    import commtrace.mpi
    commtrace.mpi.install()            # once, before init_process_group
    dist.init_process_group("mpi")     # rank/size from MPI, no env vars

``install()`` does nothing when torch has its own ProcessGroupMPI. Otherwise it
tells c10d that MPI is available and gives ``_new_process_group_helper`` a
``ProcessGroupMPI`` whose ``create(ranks)`` returns the mpi4py-backed
:class:`~commtrace.mpi.backend.MPIProcessGroup`. ``register_backend("mpi")``
cannot do this: c10d tests for "mpi" before it looks at plugins.
"""
from __future__ import annotations

import torch.distributed as dist

__all__ = ["install", "is_installed", "native_mpi", "native_extension", "fastpath_status"]


def native_mpi() -> bool:
    """torch was built with MPI (its real ProcessGroupMPI exists)."""
    try:
        from torch._C import _distributed_c10d as c
    except ImportError:
        return False
    return hasattr(c, "ProcessGroupMPI")


def install() -> str:
    """Make backend "mpi" usable. Returns "native" or "mpi4py".

    Initializes MPI (commtrace.mpienv.world()) so rank and size are known.
    Idempotent. Raises RuntimeError when torch.distributed or mpi4py is missing.
    """
    if not dist.is_available():
        raise RuntimeError("commtrace.mpi: torch.distributed is not available in this torch build")
    if native_mpi():
        return "native"
    from torch.distributed import distributed_c10d as c10d

    from .. import mpienv
    from .backend import ProcessGroupMPIFactory

    try:
        mpienv.world()
    except ImportError as e:
        raise RuntimeError("commtrace.mpi: mpi4py is required for the mpi backend "
                           "(pip install mpi4py)") from e
    # _new_process_group_helper reads these module globals at call time.
    c10d.ProcessGroupMPI = ProcessGroupMPIFactory
    c10d._MPI_AVAILABLE = True
    return "mpi4py"


def is_installed() -> bool:
    """Backend "mpi" can be used (natively or through install())."""
    if native_mpi():
        return True
    from torch.distributed import distributed_c10d as c10d
    from .backend import ProcessGroupMPIFactory

    return getattr(c10d, "ProcessGroupMPI", None) is ProcessGroupMPIFactory and c10d._MPI_AVAILABLE


def native_extension():
    """The C++ fast path's ``commtrace.native.Extension`` (``commtrace build-native``
    builds it), or None when it cannot be built for the MPI that mpi4py uses."""
    from .fastpath import extension

    return extension()


def fastpath_status() -> str:
    """"native" if the last mpi group created uses the C++ fast path, else
    "python: <reason>" (see commtrace/mpi/fastpath.py)."""
    from .fastpath import status

    return status()
