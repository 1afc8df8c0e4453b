"""DDP comm hooks: which gradient bucket each of their collectives serves.

A hook may issue several collectives per bucket, some in ``Future.then`` callbacks that
gloo runs on its worker thread (PowerSGD's P and Q) while the main thread goes on: counting
all_reduces cannot number those. So a hook registered through ``register_comm_hook`` runs
with ``bucket`` = ``GradBucket.index()`` and the module's label in its thread's context,
and ``Future.then`` / ``add_done_callback`` called inside carry that context to their
callback. The hook's signature (DDP checks it) is its own. Built-in C++ hooks and DDP
without a hook issue one all_reduce per bucket, in order: the reader counts those.
"""
from __future__ import annotations

import functools

from .recorder import Recorder
from .scopes import drop_own_frame, in_context


def install(hooks) -> None:
    """Install on ``hooks`` (a ``phases.PhaseHooks``, whose uninstall undoes it)."""
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
            callback = in_context(rec, callback, lambda args, kwargs: rec.push_thread_context(fields),
                                  rec.pop_thread_context)
            return orig(fut, callback, *args, **kwargs)
        except BaseException as e:
            drop_own_frame(e)
            raise
    return method
