"""The native (C++) wrapper for CPU-only groups, and the choice between it and
``wrapper.TracedProcessGroup``.

The C++ class (``native/traced_pg.cpp``) records ops with the same semantics
as the Python wrapper, into a per-Recorder log that the flush thread drains.
What stays in Python is what happens once per distinct call: describing it as
a sig (``describe``) and deciding whether a code object is internal.

Groups that can see CUDA tensors keep the Python wrapper: its CUDA end-event
timing is the part verified on GPUs. Without a built extension (no compiler,
``COMMTRACE_NATIVE=0``) every group uses the Python wrapper.
"""
from __future__ import annotations

import threading
import types

import torch.distributed as dist

from .. import native
from . import ops
from .recorder import Recorder
from .wrapper import TracedProcessGroup, _is_internal, _lookup, mirror_backends

EXTENSION = native.Extension("commtrace_traced_pg", ("capture/native/traced_pg.cpp",))
_lock = threading.Lock()


def module():
    """The compiled module, or None (``native.error(EXTENSION)`` says why)."""
    return native.load(EXTENSION)


def traced_types() -> tuple:
    mod = module()
    return (TracedProcessGroup, mod.TracedPG) if mod is not None else (TracedProcessGroup,)


def _log(rec: Recorder, mod):
    with _lock:
        if rec.native_log is None:
            def describe(gid, method, args, ident, frame):
                grp = rec.group_lines[gid]
                return _lookup(rec, grp["ranks"], True, method, ops.SPECS[method], ident, rec.context_key,
                               args, {}, frame)[0]
            rec.native_log = mod.Log(describe, _is_internal, rec)
        return rec.native_log


def kind_for(inner: dist.ProcessGroup) -> str:
    """Which wrapper ``make_traced`` gives ``inner``: "native" or "python"."""
    if module() is None or not _cpu_only(inner) or _written_in_python(inner):
        return "python"
    return "native"


def _written_in_python(inner) -> bool:
    """A ProcessGroup subclass defined in Python (the mpi4py backend without its
    C++ fast path, a user's backend). C++ reaches its methods only through
    torch's trampoline, which bridges some ops and not others (reduce, gather,
    scatter, recv_anysource fall through to the dispatcher and fail), so only
    the Python wrapper, which calls its Python methods by name, can forward
    every op."""
    for cls in type(inner).__mro__:
        if cls is dist.ProcessGroup:
            return False
        if any(isinstance(v, types.FunctionType) for v in vars(cls).values()):
            return True
    return False


def make_traced(inner: dist.ProcessGroup, rec: Recorder, gid: int, ranks: list[int]):
    """A traced wrapper of ``inner`` recording as group ``gid`` (see ``kind_for``)."""
    if kind_for(inner) == "native":
        return make_native(inner, rec, gid)
    return TracedProcessGroup(inner, rec, gid, ranks)


def make_native(inner: dist.ProcessGroup, rec: Recorder, gid: int):
    """The native wrapper of ``inner`` (the extension must be loaded; see ``kind_for``
    for the groups it suits)."""
    mod = module()
    traced = mod.TracedPG(inner, _log(rec, mod), gid)
    mirror_backends(traced, inner, names=False)
    return traced


def _cpu_only(inner) -> bool:
    import torch
    if not torch.cuda.is_available():
        return True
    return all(dev.type == "cpu" for dev in inner._device_types)
