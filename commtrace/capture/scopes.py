"""How commtrace wraps torch's functions: inside an annotation context (the ops they issue carry its
fields: phase, detail, module), out of the program's tracebacks (an exception raised through a
wrapper shows no ``commtrace/...`` line), and right after their module loads (``AfterImport``)."""
from __future__ import annotations

import functools
import sys

from .. import torch_compat


def drop_own_frame(exc: BaseException) -> None:
    """In a wrapper's ``except`` clause, right before a bare ``raise`` (which adds no frame
    back): removes the wrapper's own frame from the head of ``exc``'s traceback."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        exc.__traceback__ = tb.tb_next


def in_context(rec, orig, enter, leave=None):
    """``orig`` wrapped: ``enter(args, kwargs)`` pushes an annotation context on ``rec``
    (and returns its token), popped by ``leave`` (default ``rec.pop_context``) when ``orig``
    returns or raises; a raised exception's traceback reads as without commtrace. While Dynamo
    traces it (a torch function called inside compiled code: DDP's ``_pre_forward`` under
    ``torch.compile(ddp_model, fullgraph=True)``) it is ``orig`` alone, as Dynamo reads
    ``is_compiling()`` as True: no graph break of ours (``fullgraph=True`` failed on one,
    "Unsupported context manager"), the graph untraced torch builds; compiled, the call has no
    annotation context (the module tracker's hooks do the same)."""
    leave = leave or rec.pop_context
    import torch
    compiling = torch.compiler.is_compiling

    @functools.wraps(orig)
    def scoped(*args, **kwargs):
        if compiling():
            return orig(*args, **kwargs)
        token = enter(args, kwargs)
        try:
            return orig(*args, **kwargs)
        except BaseException as e:
            drop_own_frame(e)
            raise
        finally:
            leave(token)
    keep_wrapper_eager(scoped, enter, leave)
    return scoped


def keep_wrapper_eager(scoped, *own) -> None:
    """A wrapper of a torch function (in_context): Dynamo never compiles its
    frame nor its ``own`` functions' (and theirs), and treats the function it wraps as usual
    (DDPOptimizer compiles the module DDP.forward calls). Compiled, their Python side effects
    became constants replayed on every call: under torch.compile DDP.forward's iteration stayed
    1 and DDP's buckets were numbered on across steps. Nothing where this torch has no per-code
    strategies (install time only: marks code objects)."""
    skip_frame, skip_all = (torch_compat.dynamo_code_skipper(callees) for callees in (False, True))
    if skip_frame is None:
        return
    skip_frame(scoped.__code__)
    for fn in own:
        code = getattr(fn, "__code__", None)
        if code is not None:
            skip_all(code)


class AfterImport:  # a meta path finder (importlib.abc would cost every traced process ~5 ms)
    """Calls ``after[name](module)`` right after module ``name`` has loaded; a failure costs
    that call only (one line naming ``what``, formatted with the module's ``name``)."""

    def __init__(self, after: dict, what: str):
        self.after, self.what = after, what

    def find_spec(self, fullname, path, target=None):
        patch = self.after.get(fullname)
        if patch is None:
            return None
        del self.after[fullname]
        if not self.after:
            self.remove()
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        orig_exec = spec.loader.exec_module

        def exec_module(module):
            orig_exec(module)
            try:
                patch(module)
            except Exception as exc:  # commtrace's part is optional; the program's import is not
                sys.stderr.write(f"commtrace: {self.what.format(name=fullname)} disabled: {exc}\n")
        spec.loader.exec_module = exec_module
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
