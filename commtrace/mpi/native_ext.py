"""The mpi backend's C++ fast path, as ``commtrace.native`` discovers it
(``commtrace build-native``). Its flags come from the MPI that mpi4py uses
(``fastpath.extension``); None where it cannot be built for that MPI."""
from __future__ import annotations

from .. import native


def extensions() -> list[tuple[str, native.Extension | None]]:
    from .fastpath import extension

    try:
        return [("mpi fast path", extension())]
    except Exception:  # an MPI install the probe does not understand: not buildable here
        return [("mpi fast path", None)]
