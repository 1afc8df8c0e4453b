"""Keep torch.compile (Dynamo) out of commtrace's own frames.

Why: while code compiled with torch.compile runs, Dynamo's frame hook tries to
compile every Python frame that is entered, including the ProcessGroup methods
that C++ calls back into (DDP's reducer calling the tracing wrapper or the
mpi4py backend). Those frames read attributes of process-group objects, which
Dynamo treats as opaque, and compiling them fails ("unregistered member on an
OpaqueObject"): a compiled DDP model crashed under commtrace. Marking their
code objects SKIP, together with everything they call, makes Dynamo run them as
plain Python, as if no compiler were active. The marking lives on the code
object, so it costs nothing per call. It uses torch's private C API; a torch
without it gets no marks (and has no such hook to skip).
"""
from __future__ import annotations


def skip_frames(*functions) -> None:
    """Never let Dynamo compile these functions' frames or the frames they call."""
    try:
        from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
        strategy = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
        for fn in functions:
            code = getattr(fn, "__code__", None)
            if code is not None:
                set_code_exec_strategy(code, strategy)
    except Exception:  # a torch whose private API differs: tracing must still work
        return


def skip_class_frames(*classes) -> None:
    """``skip_frames`` for every method (and property accessor) a class defines."""
    for cls in classes:
        for attr in vars(cls).values():
            if isinstance(attr, property):
                skip_frames(*(f for f in (attr.fget, attr.fset, attr.fdel) if f is not None))
            else:
                skip_frames(getattr(attr, "__func__", attr))
