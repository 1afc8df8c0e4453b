"""The one place where commtrace imports mpi4py (and therefore calls MPI_Init).

The first ``MPI_Init_thread`` fixes the thread level, so the launcher (clock sync,
rendezvous) and the mpi backend both go through :func:`world`. ``MPI_THREAD_MULTIPLE``:
the backend's worker and progress threads call MPI while the main thread does too
(~0.1 us on a 1-element Allreduce, docs/mpi-backend.md).
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import sys

from . import env_vars

THREAD_LEVEL = "multiple"

# MCA defaults applied only when the user did not choose: the ring algorithm
# makes a 4 MB in-place MPI_Iallreduce as fast as the blocking MPI_Allreduce
# (libnbc's default choice was 2.8x slower here, see docs/mpi-backend.md).
_OMPI_DEFAULTS = {
    "OMPI_MCA_coll_libnbc_iallreduce_algorithm": "ring",
}

_world = None
_MPI = None          # mpi4py.MPI, also while hidden from the program (hide_from_program)
_hidden: dict = {}   # name -> module taken out of sys.modules until the program imports mpi4py


def is_initialized() -> bool:
    mod = sys.modules.get("mpi4py.MPI") or _hidden.get("mpi4py.MPI")  # hidden or not
    return bool(mod is not None and mod.Is_initialized() and not mod.Is_finalized())


def _import_mpi(initialize: bool):
    """Import mpi4py.MPI with commtrace's settings (only the first import applies them)."""
    global _MPI
    if _MPI is not None:
        return _MPI
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
        _set_mca_defaults()
    from mpi4py import MPI

    _MPI = MPI
    if MPI.Is_initialized():
        env_vars.restore(_mca_added)   # read in MPI_Init: the program (and its children) see their own
    return MPI


_mca_added: dict = {}   # the defaults set -> None (they were unset)


def _set_mca_defaults() -> None:
    _mca_added.update({k: None for k in _OMPI_DEFAULTS if k not in os.environ})
    os.environ.update({k: _OMPI_DEFAULTS[k] for k in _mca_added})


def library_version() -> str:
    """MPI_Get_library_version of mpi4py's MPI, without initializing it (a build step asks)."""
    return _import_mpi(initialize=False).Get_library_version().rstrip("\x00").strip()


def world():
    """Initialize MPI (once, at THREAD_LEVEL) and return mpi4py's COMM_WORLD."""
    global _world
    if _world is not None:
        return _world
    MPI = _import_mpi(initialize=True)

    if not MPI.Is_initialized():
        # Someone imported mpi4py with rc.initialize=False: initialize now.
        _set_mca_defaults()
        try:
            MPI.Init_thread(getattr(MPI, "THREAD_" + THREAD_LEVEL.upper()))
        finally:
            env_vars.restore(_mca_added)
    _world = MPI.COMM_WORLD
    return _world


def mpi_module():
    """mpi4py.MPI, initialized through :func:`world`."""
    world()
    return _MPI


def hide_from_program() -> None:
    """Take mpi4py (which ``commtrace run`` imported) out of ``sys.modules`` until the program
    imports it: a finder then hands the same, initialized, modules back with their own specs."""
    names = [n for n in list(sys.modules) if n == "mpi4py" or n.startswith("mpi4py.")]
    if not names:
        return
    for n in names:
        _hidden[n] = sys.modules.pop(n)
    sys.meta_path.insert(0, _HiddenFinder())


class _HiddenFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Gives back the modules ``hide_from_program`` took out (all at once)."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _hidden:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        mod = _hidden.pop(fullname)
        for name, other in list(_hidden.items()):  # the package and its other submodules too
            sys.modules.setdefault(name, other)
            del _hidden[name]
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=getattr(mod.__spec__, "origin", None))
        spec.submodule_search_locations = getattr(mod.__spec__, "submodule_search_locations", None)
        self._pending = (mod, mod.__spec__)
        return spec

    def create_module(self, spec):
        return self._pending[0]

    def exec_module(self, module):
        module.__spec__ = self._pending[1]  # the import system set ours; the module keeps its own
        self._pending = None
