"""Keep torch.compile (Dynamo) out of commtrace's own frames.

While compiled code runs, Dynamo tries to compile every frame entered, including the
ProcessGroup methods C++ calls back (DDP's reducer into the wrapper or the mpi4py backend);
they read opaque process-group objects and compiling them fails ("unregistered member on an
OpaqueObject"). Where torch has per-code strategies (``set_code_exec_strategy``), each code
object is marked SKIP (free per call); else (2.4) each method is wrapped to turn the frame
hook off for the call, as ``torch.compiler.disable`` does (not used itself: it imports
``torch._dynamo``, which an untraced program would not).
"""
from __future__ import annotations

import functools

from . import torch_compat
from .capture.scopes import drop_own_frame


def skip_frames(fn):
    """``fn``, or a wrapper of it, whose frames (and the frames it calls) Dynamo
    never compiles: for a function that C++ calls back, e.g. ``@skip_frames``."""
    skip = _code_marker() or _hook_off_wrapper()
    return fn if skip is None else skip(fn)


def skip_class_frames(*classes) -> None:
    """``skip_frames`` for every method (and property accessor) these classes define."""
    skip = _code_marker() or _hook_off_wrapper()
    if skip is None:
        return
    for cls in classes:
        for name, attr in list(vars(cls).items()):
            new = _skipped(attr, skip)
            if new is not attr:
                setattr(cls, name, new)


def _skipped(attr, skip):
    """``attr`` with its functions passed through ``skip`` (which marks a function
    in place and returns it, or returns a wrapper)."""
    if isinstance(attr, property):
        f = [skip(g) if g is not None else None for g in (attr.fget, attr.fset, attr.fdel)]
        return attr if f == [attr.fget, attr.fset, attr.fdel] else property(*f, attr.__doc__)
    if isinstance(attr, (staticmethod, classmethod)):
        f = skip(attr.__func__)
        return attr if f is attr.__func__ else type(attr)(f)
    if callable(attr) and hasattr(attr, "__code__"):
        return skip(attr)
    return attr


def _code_marker():
    """Marks a function's code object SKIP, frames it calls included (None where
    this torch has no per-code strategies)."""
    skip_code = torch_compat.dynamo_code_skipper(callees=True)
    if skip_code is None:
        return None

    def mark(fn):
        skip_code(fn.__code__)
        return fn
    return mark


def _hook_off_wrapper():
    """Wraps a function so that Dynamo's frame hook is off while it runs (None
    where this torch has no ``set_eval_frame``/``skip_code``)."""
    try:
        import torch
        eval_frame = torch._C._dynamo.eval_frame
        set_eval_frame, skip_code = eval_frame.set_eval_frame, eval_frame.skip_code
    except Exception:
        return None

    def wrap(fn):
        @functools.wraps(fn)
        def hook_off(*args, **kwargs):
            prior = set_eval_frame(None)
            try:
                return fn(*args, **kwargs)
            except BaseException as e:
                drop_own_frame(e)  # the exception continues as if this wrapper were not there
                raise
            finally:
                set_eval_frame(prior)
        return hook_off
    # The wrapper's own frame is entered with the hook still on: skip_code keeps
    # Dynamo off that one frame. Every wrapper shares the code object.
    skip_code(wrap(len).__code__)
    return wrap
