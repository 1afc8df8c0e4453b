"""The native (C++) wrapper, and the choice between it and ``wrapper.TracedProcessGroup``.

The C++ class (``native/traced_pg.cpp``) records ops as the Python wrapper does, into a
per-Recorder log the flush thread drains; Python only describes each new call (a sig)
and says whether a code object is internal. Groups written in C++ get it; Python
backends, and every group where the extension is not built, get the Python wrapper.
"""
from __future__ import annotations

import functools
import threading
import types

import torch.distributed as dist

from .. import native
from ..dynamo import skip_frames
from . import ops
from .native_ext import EXTENSION
from .recorder import Recorder
from .wrapper import TracedProcessGroup, _is_internal, _lookup, forward_to_inner, mirror_backends

_lock = threading.Lock()
_cpu_only_groups: dict = {}  # (id(recorder), gid) -> no device but the CPU can reach the group


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
                """(sig id, CPU op, CUDA device index or -1) of a call the C++ side has not seen."""
                grp = rec.group_lines[gid]
                sig = _lookup(rec, grp["ranks"], _cpu_only_groups[id(rec), gid], method, ops.SPECS[method], ident,
                              rec.current_context_key(), args, {}, frame)[0]
                cuda = rec.sig_cuda[sig]
                return sig, rec.sig_cpu[sig], -1 if cuda is None else int(cuda)
            # C++ calls both back, also while torch.compile'd code runs
            rec.native_log = mod.Log(skip_frames(describe), skip_frames(_is_internal), rec)
            rec.native_log.set_paused(rec.closed)  # a group made while tracing is stopped
        return rec.native_log


def kind_for(inner: dist.ProcessGroup) -> str:
    """Which wrapper ``make_traced`` gives ``inner``: "native" or "python"."""
    return "python" if module() is None or _written_in_python(inner) else "native"


def _written_in_python(inner) -> bool:
    """A ProcessGroup subclass defined in Python: torch's trampoline bridges only some of its
    ops to C++ (reduce, gather, scatter, recv_anysource fail), so only the Python wrapper,
    which calls its methods by name, forwards every op."""
    for cls in type(inner).__mro__:
        if cls is dist.ProcessGroup:
            return False
        if any(isinstance(v, types.FunctionType) for v in vars(cls).values()):
            return True
    return False


def make_traced(inner: dist.ProcessGroup, rec: Recorder, gid: int, ranks: list[int], kind: str | None = None):
    """A traced wrapper of ``inner`` recording as group ``gid``; ``kind``: ``kind_for(inner)``
    ("native" needs the extension loaded)."""
    if (kind or kind_for(inner)) != "native":
        return TracedProcessGroup(inner, rec, gid, ranks)
    mod = module()
    traced = _traced_class(mod)(inner, _log(rec, mod), gid)
    _cpu_only_groups[id(rec), gid] = mirror_backends(traced, inner)
    return traced


@functools.lru_cache(maxsize=None)
def _traced_class(mod):
    forward_to_inner(mod.TracedPG)
    return mod.TracedPG
