"""``init_process_group("mpi")`` on torch wheels built without MPI (docs/mpi-backend.md).

    import commtrace.mpi
    commtrace.mpi.install()            # once, before init_process_group
    dist.init_process_group("mpi")     # rank/size from MPI, no env vars

``install()`` (nothing when torch has its own ProcessGroupMPI) sets the two c10d globals
that make it build the mpi4py-backed MPIProcessGroup (``register_backend("mpi")`` cannot:
c10d tests for "mpi" before plugins). ``commtrace run`` uses ``serve_requests()`` instead,
which changes nothing a program can probe.
"""
from __future__ import annotations

import functools
import threading

import torch.distributed as dist

from ..capture.scopes import drop_own_frame

__all__ = ["install", "serve_requests", "native_mpi", "native_extension", "fastpath_status"]


def native_mpi() -> bool:
    """torch was built with MPI (its real ProcessGroupMPI exists)."""
    try:
        from torch._C import _distributed_c10d as c
    except ImportError:
        return False
    return hasattr(c, "ProcessGroupMPI")


def install() -> str:
    """Make backend "mpi" usable (idempotent; initializes MPI so rank and size are known):
    "native" or "mpi4py"; RuntimeError without torch.distributed or mpi4py."""
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


_serving = threading.Lock()


def serve_requests() -> bool:
    """Make an explicit ``init_process_group("mpi")`` / ``new_group(backend="mpi")`` work without
    telling anyone else that MPI is available (``commtrace run``): c10d's
    ``_new_process_group_helper`` (the one function that checks ``is_mpi_available()``;
    ``Backend.backend_list`` always lists "mpi") sees ``install()``'s two globals during a
    call naming "mpi" only. False when torch has MPI itself."""
    if native_mpi():
        return False
    from torch.distributed import distributed_c10d as c10d

    helper = c10d._new_process_group_helper
    if getattr(helper, "_commtrace_serves_mpi", False):
        return True

    @functools.wraps(helper)
    def new_process_group_helper(*args, **kwargs):
        try:
            if not _names_mpi(kwargs.get("backend", args[3] if len(args) > 3 else None)):
                return helper(*args, **kwargs)
            from .. import mpienv
            from .backend import ProcessGroupMPIFactory

            mpienv.world()
            with _serving:
                saved = c10d._MPI_AVAILABLE, c10d.__dict__.get("ProcessGroupMPI", _ABSENT)
                c10d._MPI_AVAILABLE, c10d.ProcessGroupMPI = True, ProcessGroupMPIFactory
                try:
                    return helper(*args, **kwargs)
                finally:
                    c10d._MPI_AVAILABLE = saved[0]
                    if saved[1] is _ABSENT:
                        c10d.__dict__.pop("ProcessGroupMPI", None)
                    else:
                        c10d.ProcessGroupMPI = saved[1]
        except BaseException as e:
            drop_own_frame(e)  # the program's tracebacks read as without commtrace
            raise

    new_process_group_helper._commtrace_serves_mpi = True
    c10d._new_process_group_helper = new_process_group_helper
    return True


_ABSENT = object()


def _names_mpi(backend) -> bool:
    """"mpi", "MPI", "cpu:mpi,cuda:nccl", ... (torch's backend string forms)."""
    return backend is not None and any(p.strip().split(":")[-1] == "mpi" for p in str(backend).lower().split(","))


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
