"""DDP comm hooks: which gradient bucket each of their collectives serves.

DDP's reducer calls a comm hook once per gradient bucket, in bucket order,
with a ``GradBucket``. A hook may issue several collectives for one bucket:
PowerSGD all_reduces the uncompressed tensors, then P, then Q, the last two
inside callbacks chained with ``Future.then``, which gloo runs on its worker
thread while the main thread goes on with the backward pass. Counting a
backward pass's all_reduces cannot number such buckets, so:

* a hook registered through ``DistributedDataParallel.register_comm_hook`` is
  wrapped: while it runs, the calling thread's annotation context carries
  ``bucket`` = ``GradBucket.index()`` and the DDP module's label
  (``Recorder.push_thread_context``; other threads are unaffected);
* ``Future.then`` / ``Future.add_done_callback`` called inside that scope wrap
  their callback so that it runs under the same context, on whichever thread
  runs it (inline if the future is already done).

The hook's arguments, result and exceptions are unchanged; ``__qualname__``,
``__wrapped__`` and so the signature DDP checks are the hook's own. Hooks DDP
implements in C++ (``_register_builtin_comm_hook``) and DDP without a hook
issue one all_reduce per bucket, in bucket order: the reader numbers those by
counting. Outside a hook the patched Future methods cost one dict test.
"""
from __future__ import annotations

import functools

from .recorder import Recorder
from .tbhide import drop_own_frame


def install(hooks) -> None:
    """Install on ``hooks`` (a ``phases.PhaseHooks``: its ``_patch`` undoes it at uninstall)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rec = hooks.rec
    grad_bucket = dist.GradBucket

    def wrap_register(orig):
        @functools.wraps(orig)
        def register_comm_hook(ddp, state, hook):
            label = hooks._label_of(ddp, getattr(ddp, "module", None))
            try:
                return orig(ddp, state, _bucket_scoped(rec, hook, label, grad_bucket) if callable(hook) else hook)
            except BaseException as e:  # e.g. DDP's check of the hook's signature
                drop_own_frame(e)
                raise
        return register_comm_hook

    hooks._patch(DDP, "register_comm_hook", wrap_register)
    for name in ("then", "add_done_callback"):
        if hasattr(torch._C.Future, name):
            hooks._patch(torch._C.Future, name, lambda orig: _carrying_context(rec, orig))


def _bucket_scoped(rec: Recorder, hook, label: str, grad_bucket):
    @functools.wraps(hook)
    def bucket_scoped(state, bucket, *args, **kwargs):
        # DDP's Python reducer path (compiled autograd) passes (grad, param): no bucket.
        if rec.closed or type(bucket) is not grad_bucket:
            return hook(state, bucket, *args, **kwargs)
        base = rec.thread_context_fields()
        fields = {**(rec.context_fields() if base is None else base), "bucket": bucket.index(), "module": label}
        token = rec.push_thread_context(fields)
        try:
            return hook(state, bucket, *args, **kwargs)
        except BaseException as e:
            drop_own_frame(e)
            raise
        finally:
            rec.pop_thread_context(token)
    return bucket_scoped


def _carrying_context(rec: Recorder, orig):
    """``Future.then`` / ``add_done_callback`` that, called in a thread with its own
    context (a comm hook's bucket scope), runs the callback under that context."""

    @functools.wraps(orig)
    def method(fut, callback, *args, **kwargs):
        fields = rec.thread_context_fields() if rec.thread_context_keys else None
        if fields is None or not callable(callback):
            return orig(fut, callback, *args, **kwargs)
        try:
            return orig(fut, _in_context(rec, fields, callback), *args, **kwargs)
        except BaseException as e:
            drop_own_frame(e)
            raise
    return method


def _in_context(rec: Recorder, fields: dict, callback):
    @functools.wraps(callback)
    def in_context(*args, **kwargs):
        token = rec.push_thread_context(fields)
        try:
            return callback(*args, **kwargs)
        except BaseException as e:
            drop_own_frame(e)
            raise
        finally:
            rec.pop_thread_context(token)
    return in_context
