"""TracedProcessGroup: a ProcessGroup that records every op and forwards it unchanged.

A Python subclass, because pybind's trampoline routes C++ callers (DDP's reducer, functional
collectives) into its methods. The real backend is registered on it too (DDP's logger and
``_get_backend`` need it), so every op is overridden here: nothing may reach that backend untraced.

Hot path (budget: a few microseconds per op):
* the backend call is issued first and the op described while it works; until
  then the row's sig slot holds the call, so the flush thread and the watchdog
  can describe an op that never returns (``deferred_sig``);
* a cheap key (method, shapes, dtypes, options, thread, call site) indexes
  interned sigs; the full description is built the first time a key is seen;
* a blocking CPU op is waited for here (its caller would wait right after), so
  its end costs a clock read; CUDA ops never are (that would order streams);
* async ends are timed by ``CompletionTracker.track``, never by a host sync.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from .. import torch_compat
from ..dynamo import skip_class_frames
from ..trace import schema
from . import ops
from .completion import FLAG_IN_WAIT, FLAGS, GROUP, SEQ, SIG, STATUS, T_CALL, T_END
from .recorder import Recorder
from .scopes import drop_own_frame

_now = time.monotonic_ns
_ident = threading.get_ident
_Tensor = torch.Tensor
_FAILED = schema.STATUS_FAILED
_COMPLETED = schema.STATUS_COMPLETED
_IN_FLIGHT = schema.STATUS_IN_FLIGHT


_getframe = sys._getframe
_INTERNAL_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, sys.modules["commtrace"]))
# Plumbing between a caller and torch: besides the stdlib's, the wrapper of typing_extensions'
# ``deprecated`` (``warnings.deprecated`` from Python 3.13), which wraps torch 2.13's
# all_gather_into_tensor and reduce_scatter_tensor: without it every such call was placed there.
_STDLIB_SKIP = tuple(os.sep + n for n in ("runpy.py", "threading.py", "contextlib.py", "functools.py",
                                          "typing_extensions.py", "warnings.py"))
# id(code object) -> frame is inside torch/commtrace/plumbing. Keyed by id:
# hashing a code object rehashes its name, bytecode and constants on every
# lookup (0.1-0.25 us for torch's wrappers); _kept_code keeps the ids valid.
_internal_code: dict = {}
_kept_code: list = []


def _is_internal(code) -> bool:
    fn = code.co_filename
    return fn.startswith(_INTERNAL_DIRS) or fn.startswith("<") or fn.endswith(_STDLIB_SKIP)


def first_user_frame(f):
    """``f`` or the nearest frame above it that is user code (None if none); one dict lookup a frame."""
    cache = _internal_code
    while f is not None:
        code = f.f_code
        internal = cache.get(id(code))
        if internal is None:
            _kept_code.append(code)
            internal = cache[id(code)] = _is_internal(code)
        if not internal:
            return f
        f = f.f_back
    return None


def user_frame(depth: int = 2):
    """The innermost frame of user code above the caller (None if there is none)."""
    try:
        return first_user_frame(_getframe(depth))
    except ValueError:
        return None


def callsite_text(frame) -> str | None:
    if frame is None:
        return None
    fn = frame.f_code.co_filename
    with contextlib.suppress(ValueError):
        rel = os.path.relpath(fn)
        fn = rel if not rel.startswith("..") else fn
    return f"{fn}:{frame.f_lineno} ({frame.f_code.co_name})"


# Options type -> the fields that change what the op does (timeouts are left
# out). Looked up per type so the key never pays for a missing attribute.
_OPT_FIELDS: dict = {}


def _opts_key(o):
    ot = type(o)
    f = _OPT_FIELDS.get(ot)
    if f is None:
        f = _OPT_FIELDS[ot] = tuple(n for n in ("reduceOp", "rootRank", "asyncOp") if hasattr(ot, n))
    # ReduceOp hashes and compares by its op, so it can sit in the key as is.
    return (ot, *[getattr(o, n) for n in f])


def _tensor_key(t):
    return (t.shape, t.dtype, t.is_cuda)


# The fast path below reads asyncOp, which AllreduceOptions has from torch 2.8 on; before,
# its calls take the generic path (None never is a type).
_AllreduceOptions = dist.AllreduceOptions if torch_compat.has_async_op(dist.AllreduceOptions) else None
_BroadcastOptions = dist.BroadcastOptions
_OPTIONS_TYPES = torch_compat.options_types()
_async_op = torch_compat.async_op
_sparse_call = ops.sparse_call


def call_key(args, kwargs):
    """(hashable key of the call's arguments, opts or None). Must stay cheap: the common
    ``([tensor], opts)`` of torch.distributed and DDP takes the first branch."""
    if len(args) == 2 and not kwargs:
        a, o = args
        if type(a) is list and len(a) == 1:
            ot = type(o)
            if ot is _AllreduceOptions:
                t = a[0]
                return (t.shape, t.dtype, t.is_cuda, ot, o.reduceOp, o.asyncOp), o
            if ot is _BroadcastOptions:
                t = a[0]
                return (t.shape, t.dtype, t.is_cuda, ot, o.rootRank, o.asyncOp), o
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
        elif type(a) in _OPTIONS_TYPES:
            opts = a
            key.append(_opts_key(a))
        else:
            key.append(a if a is None or isinstance(a, (int, str, float, bool)) else repr(a))
    if kwargs:
        for k in sorted(kwargs):
            v = kwargs[k]
            if type(v) in _OPTIONS_TYPES:
                opts = v
                key.append((k, _opts_key(v)))
            else:
                key.append((k, call_key((v,), None)[0]))
    return tuple(key), opts


def mirror_backends(wrapper, inner) -> bool:
    """Make ``wrapper`` look like ``inner`` to torch: its backends per device, default backend
    type and bound device. True if only the CPU reaches the group (blocking ops waited here)."""
    cpu_only = True
    registered = set()
    for dev in inner._device_types:
        try:
            backend = inner._get_backend(dev)
        except Exception:
            continue
        btype = getattr(dist.ProcessGroup.BackendType, str(inner._get_backend_name()).upper(),
                        dist.ProcessGroup.BackendType.CUSTOM)
        wrapper._register_backend(dev, btype, backend)
        registered.add(btype)
        if dev.type != "cpu" and torch.cuda.is_available():
            cpu_only = False
    with contextlib.suppress(Exception):
        default_type = getattr(dist.ProcessGroup.BackendType, str(inner._get_backend_name()).upper())
        # Only a type with a backend behind it: from torch 2.15 the rank and size of a group with a
        # default type come from that backend (a group written in Python, the mpi4py one, has none).
        if default_type in registered:
            wrapper._set_default_backend(default_type)
    with contextlib.suppress(Exception):
        wrapper.bound_device_id = inner.bound_device_id
    return cpu_only


class TracedProcessGroup(dist.ProcessGroup):
    """Records each op of ``inner`` into ``recorder`` as group ``gid``."""

    def __init__(self, inner: dist.ProcessGroup, recorder: Recorder, gid: int, global_ranks: list[int]):
        super().__init__(inner.rank(), inner.size())
        self._inner = inner
        self._rec = recorder
        self._gid = gid
        self._ranks = list(global_ranks)
        self._ranks_id = id(self._ranks)  # the sig key's group part (_lookup)
        self._seq = 0
        self._p2p_seq: dict = {}
        self._cpu_only = mirror_backends(self, inner)

    # Before torch 2.6 the group name/desc accessors are not virtual: C++ keeps them in the
    # group's backends, and a group written in Python (the mpi4py one) lends none
    # ("ProcessGroup name not set" from functional collectives); c10d reads them from Python.
    group_name = property(lambda self: self._inner.group_name)
    group_desc = property(lambda self: self._inner.group_desc)
    inner = property(lambda self: self._inner)

    def __repr__(self):
        return f"<commtrace.TracedProcessGroup of {self._inner!r}>"

    def __getattr__(self, name):
        # Only names the wrapper lacks get here (never an op: no cost on the hot path). A backend
        # written in Python keeps its own attributes (counters, flags, helpers), and programs read
        # them through the group c10d hands out (``_get_default_group()``): they must answer.
        if name == "_inner":  # not set yet (inside __init__): no recursion
            raise AttributeError(name)
        return getattr(self._inner, name)

    def getGroupName(self):  # the C++ virtuals the trampoline looks up in Python
        return self._inner.group_name

    def getGroupDesc(self):
        return self._inner.group_desc

    def _p2p_next(self, op: str, key) -> int:
        peer = key[1] if len(key) > 1 else -1
        k = (op, peer)
        n = self._p2p_seq.get(k, 0) + 1
        self._p2p_seq[k] = n
        return n

    def deferred_sig(self, row: list, call: tuple) -> int:
        """The sig of an op whose thread is still inside the backend call (row[SIG] is ``call``).
        Runs on the flush or watchdog thread."""
        _, name, args, kwargs, ident, ctx = call
        frame = sys._current_frames().get(ident)
        while frame is not None and frame.f_code is not _TRACED_CODE:
            frame = frame.f_back  # skip the backend's own frames (a Python backend)
        if frame is not None:
            frame = frame.f_back
        threads = {t.ident: t.name for t in threading.enumerate()}
        sig, _, _ = _lookup(self._rec, self._ranks, self._cpu_only, name, ops.SPECS[name], ident, ctx, args,
                            kwargs, first_user_frame(frame), threads.get(ident, str(ident)))
        row[SIG] = sig
        return sig


_OWN_DIR = os.path.dirname(os.path.abspath(sys.modules["commtrace"].__file__)) + os.sep


def called_from_python(method: str) -> bool:
    """Whether Python code called the group's ``method`` on this thread (``dist.all_reduce``, a
    program's ``pg.allreduce``), not C++ (DDP's reducer, functional collectives): the nearest frame
    outside commtrace names the method. Called C++, Python's current frame is whatever entered C++
    (``loss.backward()``'s autograd call), or there is none (a device's autograd thread)."""
    f = _getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_OWN_DIR):
        f = f.f_back
    return f is not None and method in f.f_code.co_names


def _lookup(rec, ranks, cpu_only, name, spec, ident, ctx, args, kwargs, uf, thread_name=None):
    """(sig id, opts, key) of one call (also the native wrapper's); interns a new sig the first time."""
    key, opts = call_key(args, kwargs)
    if spec.sparse and ops.sparse_call(args, kwargs):  # a sparse tensor's bytes depend on its nnz
        key = (*key, ops.sparse_key(args, kwargs))
    # id() of the code object, as in _internal_code; _kept_code keeps the id valid.
    # id(ranks): one list per group; a sig names global ranks (root, peer), which depend on the group
    full = (name, ident, ctx, key, uf and id(uf.f_code), uf and uf.f_lineno, cpu_only, id(ranks))
    sig = rec.sig_ids.get(full)
    if sig is None:
        if uf is not None:
            _kept_code.append(uf.f_code)
        desc = ops.describe(name, spec, args, kwargs, ranks)
        desc["thread"] = thread_name or threading.current_thread().name
        desc["callsite"] = callsite_text(uf)
        desc.update(ctx or ())  # the annotations in force at the call (ctx is their key)
        if thread_name is None and called_from_python(name):
            desc["python_call"] = True
        if "api" in desc:  # inside an object collective (phases.label_c10d_calls)
            desc["detail"] = "object_sizes" if desc.get("dtype") == "int64" else "object_payload"
        # Blocking CPU ops are waited for inside the wrapper; device ops never are.
        desc["cpu"] = desc.get("device") == "cpu" or (desc.get("device") is None and cpu_only)
        sig = rec.add_sig(full, desc)
    return sig, opts, key


def _make_traced(name: str, spec: ops.Spec):
    op = spec.op
    p2p = spec.p2p
    sparse_ok = spec.sparse
    any_source = name == "recv_anysource"

    def traced(self, *args, **kwargs):
        rec = self._rec
        if rec.closed:  # tracing stopped (commtrace.stop, or the process is exiting)
            return getattr(self._inner, name)(*args, **kwargs)
        t0 = _now()
        ident = _ident()
        ctx = rec.context_key
        if rec.thread_context_keys:  # inside a comm hook (comm_hooks): this thread may have its own
            ctx = rec.thread_context_keys.get(ident, ctx)
        # A p2p seq counts per peer, so the key (which names the peer) comes first; a sparse
        # all_reduce's tensor is read before the backend writes its result (of another nnz) into it.
        described = p2p or (sparse_ok and _sparse_call(args, kwargs))
        if described:
            sig, opts, key = _lookup(self._rec, self._ranks, self._cpu_only, name, spec, ident, ctx, args, kwargs,
                                user_frame())
        else:
            sig = (self, name, args, kwargs, ident, ctx)   # resolved after the call is issued
        if p2p:
            seq = self._p2p_next(op, key)
        else:
            self._seq += 1
            seq = self._seq
        row = [t0, 0, 0, seq, sig, rec.iteration, self._gid, _IN_FLIGHT, 0]
        tr = rec.tracker
        active = tr.active
        rid = id(row)
        active[rid] = row
        try:
            work = getattr(self._inner, name)(*args, **kwargs)
            if not described:
                # _lookup inlined for the common case (a known sig): this is the hot path.
                key, opts = call_key(args, kwargs)
                try:
                    uf = first_user_frame(_getframe(1))
                except ValueError:  # called from C++ on a thread with no Python frames
                    uf = None       # (CUDA autograd threads: DDP's bucket hooks)
                sig = rec.sig_ids.get((name, ident, ctx, key, uf and id(uf.f_code), uf and uf.f_lineno,
                                       self._cpu_only, self._ranks_id))
                if sig is None:
                    sig = _lookup(rec, self._ranks, self._cpu_only, name, spec, ident, ctx, args, kwargs, uf)[0]
                row[SIG] = sig
            if tr.unobserved:
                tr.observe_completions()
            if work is None:
                row[1] = row[2] = _now()
                row[7] = _COMPLETED
                tr.rows.append(row)
            elif rec.sig_cpu[sig] and opts is not None and not _async_op(opts):
                # Blocking call on a CPU group: the caller waits right after we
                # return, so waiting here costs nothing and gives the exact end.
                try:
                    work.wait()
                except BaseException as e:
                    # Failed after the issue: recorded, and the work handed back, so that
                    # the caller's own wait() raises it where it would untraced.
                    row[1] = row[2] = _now()
                    row[7] = _FAILED
                    tr.rows.append(row)
                    rec.fail(row, e, tr)
                    return work
                row[1] = row[2] = _now()
                row[7] = _COMPLETED
                tr.rows.append(row)
            else:
                row[1] = _now()
                tr.track(row, work, sig, rec.sig_cpu[sig])
                if p2p and rec.sig_cpu[sig]:
                    work = _WatchedP2PWork(work, row, rec, tr, any_source)
        except BaseException as e:
            t = _now()
            if type(row[SIG]) is not int:
                row[SIG] = _lookup(self._rec, self._ranks, self._cpu_only, name, spec, ident, ctx, args, kwargs,
                                user_frame())[0]
            row[1] = row[1] or t
            row[2] = t
            row[7] = _FAILED
            tr.rows.append(row)
            rec.fail(row, e, tr)
            drop_own_frame(e)
            raise
        finally:
            del active[rid]
        return work

    traced.__name__ = name
    traced.__qualname__ = f"TracedProcessGroup.{name}"
    traced.__doc__ = f"Traced ``ProcessGroup.{name}`` ({op})."
    return traced


class _WatchedP2PWork(dist.Work):
    """The Work handed back for an async CPU p2p op: forwards to the backend's, and records the
    op failed, with its message, when the caller's ``wait()`` raises (gloo's p2p Work has no future
    to read an error from, and ``Work.exception()`` prints a torch deprecation warning). While the
    wait runs the row is not collected (FLAG_IN_WAIT): its polled end alone would read completed.
    A row written completed before the wait (the Work reported is_completed()) is written again.
    A recv from any source (``any_source``) records its sender once its wait returned (gloo sets it there)."""

    def __init__(self, inner, row: list, rec: Recorder, tracker, any_source: bool = False):
        super().__init__()
        self._inner, self._row, self._rec, self._tracker = inner, row, rec, tracker
        self._any_source = any_source

    def wait(self, *args, **kwargs):
        row = self._row
        row[FLAGS] |= FLAG_IN_WAIT
        try:
            out = self._inner.wait(*args, **kwargs)
            row[T_END] = row[T_END] or _now()  # returned: ended by now (a poll may have seen it earlier)
            if self._any_source:
                self._record_source()
            return out
        except BaseException as e:
            if row[STATUS] != _FAILED:
                # COMPLETED: a poll saw it end and a flush wrote it so (the Work said is_completed()
                # before its wait raised): written again, failed; readers keep an op's last record.
                written = row[STATUS] == _COMPLETED
                row[STATUS] = _FAILED
                self._rec.fail(row, e, self._tracker)
                if written:
                    self._tracker.rows.append(row)
            row[T_END] = row[T_END] or _now()
            raise
        finally:
            row[FLAGS] &= ~FLAG_IN_WAIT

    def _record_source(self) -> None:
        self._any_source = False   # once (a second wait)
        try:
            src = self._inner._source_rank()
        except Exception:
            return   # a backend's Work that cannot tell
        row = self._row
        if self._tracker is self._rec.tracker:   # not once its session has ended
            self._rec.record_source(row[T_CALL], row[GROUP], row[SEQ], row[SIG], src)

    def __getattr__(self, name):  # a Python backend's own Work attributes
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)


def _forwarding(inner_name: str):
    def forward(self, *args, **kwargs):
        return getattr(self._inner, inner_name)(*args, **kwargs)
    forward.__name__ = inner_name
    return forward


# Every other Work method answers the backend's (is_completed, source_rank, _source_rank, get_future, ...).
for _name in dir(dist.Work):
    if not _name.startswith("__") and _name not in ("wait", "unbox", "_pybind11_conduit_v1_") and \
            callable(getattr(dist.Work, _name)):
        setattr(_WatchedP2PWork, _name, _forwarding(_name))

# Non-op methods that must reach the real group: own name -> the inner group's method. _get_backend
# is the inner group's answer: the backend mirrored here, or a Python group's own (the mpi4py one: itself).
_FORWARDED = {
    "getBackendName": "name", "setGroupName": "_set_group_name", "setGroupDesc": "_set_group_desc",
    "start_coalescing": "_start_coalescing", "end_coalescing": "_end_coalescing",
    **{n: n for n in ("_get_backend", "_set_group_name", "_set_group_desc", "abort", "shutdown", "_start_coalescing",
                      "_end_coalescing", "_wait_for_pending_works", "set_timeout", "_register_on_completion_hook",
                      "_has_hooks", "_enable_collectives_timing", "get_group_store")},
}
for _name, _inner_name in _FORWARDED.items():
    setattr(TracedProcessGroup, _name, _forwarding(_inner_name))


def forward_to_inner(cls) -> None:
    """Give wrapper class ``cls`` (its ``inner``: the real group) the inner group's methods the base
    class would run on the wrapper itself, where torch has them: split_group / merge_remote_group
    build the new group from the wrapper's store, which it has none of (torch 2.15's dist.split_group
    on gloo died by SIGSEGV); hooks registered on it would wait where no op runs (2.14's pre/post hooks)."""
    for name in ("split_group", "merge_remote_group", "register_pre_hook", "register_post_hook",
                 "unregister_pre_hook", "unregister_post_hook", "register_abort_hook", "unregister_abort_hook"):
        if hasattr(dist.ProcessGroup, name):
            setattr(cls, name, lambda self, *a, _name=name, **kw: getattr(self.inner, _name)(*a, **kw))


forward_to_inner(TracedProcessGroup)
for _name, _spec in ops.SPECS.items():
    setattr(TracedProcessGroup, _name, _make_traced(_name, _spec))
skip_class_frames(TracedProcessGroup)  # C++ calls these back inside torch.compile'd code
# every traced method shares it (unwrapped: a torch without per-code Dynamo marks wraps them, commtrace.dynamo)
_TRACED_CODE = inspect.unwrap(TracedProcessGroup.allreduce).__code__
