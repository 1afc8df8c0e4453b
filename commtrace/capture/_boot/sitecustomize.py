"""Started in every Python child of a traced run (via PYTHONPATH), e.g. ranks created by
torch.multiprocessing.spawn or subprocess: turns tracing on when the run directory is set, then
steps aside for the program's own sitecustomize: this directory leaves ``sys.path`` and this module
``sys.modules``, and ``import sitecustomize`` runs the next one on the path under its own name, as
Python would have without commtrace. If there is none, the ImportError it raises is the one ``site``
expects and ignores (``sitecustomize`` then is absent from ``sys.modules``, as without commtrace).
"""
import os
import sys


def _activate():
    if not os.environ.get("COMMTRACE_DIR"):
        return
    try:
        from commtrace.capture import activate
        activate.activate_from_env()
    except Exception as exc:  # never break the child for the tracer's sake
        sys.stderr.write(f"commtrace: tracing disabled in pid {os.getpid()}: {exc}\n")


def _step_aside():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if not p or os.path.abspath(p) != here]
    sys.modules.pop(__name__, None)
    import importlib
    importlib.import_module("sitecustomize")


_activate()
_step_aside()
