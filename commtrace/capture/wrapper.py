"""TracedProcessGroup: a ProcessGroup that records every op and forwards it unchanged.

Why a Python subclass of ProcessGroup: pybind's trampoline routes C++ callers
(DDP's reducer, DDP construction, functional collectives) into Python methods,
so one wrapper sees both Python and C++ calls. The real backend is registered on
the wrapper too (DDP's logger and ``_get_backend`` need it); every op method is
overridden here so nothing reaches that backend untraced.

Hot-path design (budget: a few microseconds per op):
* a cheap key (method, shapes, dtypes, options, thread) indexes interned sigs;
  the full description is built only the first time a key is seen;
* a blocking op on CPU tensors is waited for here (the caller would wait right
  after anyway), so completion time costs two clock reads; CUDA ops are never
  waited for here (that would order streams or block the host);
* an async op's completion is timed by ``Recorder.track``: a callback on its
  future for large ops, polling for small ones (see there); never a host sync.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from ..trace import schema
from . import ops
from .recorder import Recorder

_now = time.monotonic_ns
_ident = threading.get_ident
_Tensor = torch.Tensor
_FAILED = schema.STATUS_FAILED
_COMPLETED = schema.STATUS_COMPLETED
_IN_FLIGHT = schema.STATUS_IN_FLIGHT


_getframe = sys._getframe
_INTERNAL_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, sys.modules["commtrace"]))
_STDLIB_SKIP = ("runpy.py", "threading.py", "contextlib.py", "functools.py")
_internal_code: dict = {}  # code object -> frame is inside torch/commtrace/plumbing


def _is_internal(code) -> bool:
    fn = code.co_filename
    return fn.startswith(_INTERNAL_DIRS) or fn.startswith("<") or fn.endswith(_STDLIB_SKIP)


def user_frame(depth: int = 2):
    """The innermost frame of user code above the caller (None if there is none).

    A cheap frame check, not a stack walk: one dict lookup per frame, cached by
    code object, and typically 2-5 frames (torch.distributed's wrappers).
    """
    try:
        f = _getframe(depth)
    except ValueError:
        return None
    cache = _internal_code
    while f is not None:
        code = f.f_code
        internal = cache.get(code)
        if internal is None:
            internal = cache[code] = _is_internal(code)
        if not internal:
            return f
        f = f.f_back
    return None


def callsite_text(frame) -> str | None:
    if frame is None:
        return None
    fn = frame.f_code.co_filename
    try:
        rel = os.path.relpath(fn)
        fn = rel if not rel.startswith("..") else fn
    except ValueError:
        pass
    return f"{fn}:{frame.f_lineno} ({frame.f_code.co_name})"


def _opts_key(o):
    # Only the fields that change what the op does; timeouts are left out.
    # ReduceOp hashes and compares by its op, so it can sit in the key as is.
    return (type(o), getattr(o, "reduceOp", None), getattr(o, "rootRank", None), o.asyncOp)


def _tensor_key(t):
    return (t.shape, t.dtype, t.is_cuda)


def call_key(args, kwargs):
    """(hashable key of the call's arguments, opts or None). Must stay cheap.

    The common shapes -- ``([tensor], opts)`` from torch.distributed and DDP --
    take the first branch (about half a microsecond); anything else is keyed
    generically.
    """
    if len(args) == 2 and not kwargs:
        a, o = args
        if type(a) is list and len(a) == 1 and hasattr(o, "asyncOp"):
            t = a[0]
            return (t.shape, t.dtype, t.is_cuda, type(o), getattr(o, "reduceOp", None),
                    getattr(o, "rootRank", None), o.asyncOp), o
    key = []
    opts = None
    for a in args:
        if isinstance(a, _Tensor):
            key.append(_tensor_key(a))
        elif isinstance(a, list):
            if a and isinstance(a[0], list):
                key.append(tuple(tuple(map(_tensor_key, x)) for x in a))
            else:
                key.append(tuple(_tensor_key(t) if isinstance(t, _Tensor) else t for t in a))
        elif hasattr(a, "asyncOp"):
            opts = a
            key.append(_opts_key(a))
        else:
            key.append(a if a is None or isinstance(a, (int, str, float, bool)) else repr(a))
    if kwargs:
        for k in sorted(kwargs):
            v = kwargs[k]
            if hasattr(v, "asyncOp"):
                opts = v
                key.append((k, _opts_key(v)))
            else:
                key.append((k, call_key((v,), None)[0]))
    return tuple(key), opts


class TracedProcessGroup(dist.ProcessGroup):
    """Records each op of ``inner`` into ``recorder`` as group ``gid``."""

    def __init__(self, inner: dist.ProcessGroup, recorder: Recorder, gid: int, global_ranks: list[int]):
        super().__init__(inner.rank(), inner.size())
        self._inner = inner
        self._rec = recorder
        self._gid = gid
        self._ranks = list(global_ranks)
        self._seq = 0
        self._p2p_seq: dict = {}
        cpu_only = True
        for dev in inner._device_types:
            try:
                backend = inner._get_backend(dev)
            except Exception:
                continue
            btype = getattr(dist.ProcessGroup.BackendType, str(inner._get_backend_name()).upper(),
                            dist.ProcessGroup.BackendType.CUSTOM)
            self._register_backend(dev, btype, backend)
            if dev.type != "cpu" and torch.cuda.is_available():
                cpu_only = False
        self._cpu_only = cpu_only
        try:
            default_type = getattr(dist.ProcessGroup.BackendType, str(inner._get_backend_name()).upper())
            self._set_default_backend(default_type)
        except Exception:
            pass
        self._set_group_name(inner.group_name)
        self._set_group_desc(inner.group_desc)
        try:
            self.bound_device_id = inner.bound_device_id
        except Exception:
            pass

    # The trampoline looks these C++ names up in Python.
    def getBackendName(self):
        return self._inner.name()

    def getGroupName(self):
        return self._inner.group_name

    def setGroupName(self, name):
        self._inner._set_group_name(name)

    def getGroupDesc(self):
        return self._inner.group_desc

    def setGroupDesc(self, desc):
        self._inner._set_group_desc(desc)

    def __repr__(self):
        return f"<commtrace.TracedProcessGroup of {self._inner!r}>"

    @property
    def inner(self) -> dist.ProcessGroup:
        return self._inner

    # Non-op methods that must reach the real group.
    def abort(self):
        return self._inner.abort()

    def shutdown(self):
        return self._inner.shutdown()

    def _start_coalescing(self, device):
        return self._inner._start_coalescing(device)

    def _end_coalescing(self, device):
        return self._inner._end_coalescing(device)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing

    def _wait_for_pending_works(self):
        return self._inner._wait_for_pending_works()

    def set_timeout(self, timeout):
        return self._inner.set_timeout(timeout)

    def _register_on_completion_hook(self, hook):
        return self._inner._register_on_completion_hook(hook)

    def _has_hooks(self):
        return self._inner._has_hooks()

    def _enable_collectives_timing(self):
        return self._inner._enable_collectives_timing()

    def get_group_store(self):
        return self._inner.get_group_store()

    def _p2p_next(self, op: str, key) -> int:
        peer = key[1] if len(key) > 1 else -1
        k = (op, peer)
        n = self._p2p_seq.get(k, 0) + 1
        self._p2p_seq[k] = n
        return n


def _make_traced(name: str, spec: ops.Spec):
    op = spec.op
    p2p = spec.p2p

    def traced(self, *args, **kwargs):
        rec = self._rec
        t0 = _now()
        if rec.unobserved:
            rec.observe_completions()
        key, opts = call_key(args, kwargs)
        uf = user_frame()
        # id() of the code object, not the object: hashing a code object rehashes
        # its constants on every call; _internal_code keeps it alive, so the id is stable.
        full = (name, _ident(), rec.context_key, key, uf and id(uf.f_code), uf and uf.f_lineno, self._cpu_only)
        sig = rec.sig_ids.get(full)
        if sig is None:
            sig = _new_sig(self, name, spec, full, args, kwargs, uf)
        if p2p:
            seq = self._p2p_next(op, key)
        else:
            self._seq += 1
            seq = self._seq
        row = [t0, 0, 0, seq, sig, rec.iteration, self._gid, _IN_FLIGHT, 0]
        active = rec.active
        rid = id(row)
        active[rid] = row
        try:
            work = getattr(self._inner, name)(*args, **kwargs)
            if work is None:
                row[1] = row[2] = _now()
                row[7] = _COMPLETED
                rec.rows.append(row)
            elif rec.sig_cpu[sig] and opts is not None and not opts.asyncOp:
                # Blocking call on a CPU group: the caller waits right after we
                # return, so waiting here costs nothing and gives the exact end.
                work.wait()
                row[1] = row[2] = _now()
                row[7] = _COMPLETED
                rec.rows.append(row)
            else:
                row[1] = _now()
                rec.track(row, work, sig, rec.sig_cpu[sig])
        except BaseException as e:
            t = _now()
            row[1] = row[1] or t
            row[2] = t
            row[7] = _FAILED
            rec.rows.append(row)
            rec.fail(row, e)
            raise
        finally:
            del active[rid]
        return work

    traced.__name__ = name
    traced.__qualname__ = f"TracedProcessGroup.{name}"
    traced.__doc__ = f"Traced ``ProcessGroup.{name}`` ({op})."
    return traced


def _new_sig(pg: TracedProcessGroup, name, spec, full_key, args, kwargs, frame) -> int:
    desc = ops.describe(name, spec, args, kwargs, pg._ranks)
    desc["thread"] = threading.current_thread().name
    desc["callsite"] = callsite_text(frame)
    desc.update(pg._rec.context_fields())
    # Blocking CPU ops are waited for inside the wrapper; device ops never are.
    desc["cpu"] = desc.get("device") == "cpu" or (desc.get("device") is None and pg._cpu_only)
    return pg._rec.add_sig(full_key, desc)


for _name, _spec in ops.SPECS.items():
    setattr(TracedProcessGroup, _name, _make_traced(_name, _spec))
