"""Started in every Python child of a traced run (via PYTHONPATH), e.g. ranks
created by torch.multiprocessing.spawn or subprocess: turns tracing on when the
run directory is set, then chains to any other sitecustomize on the path."""
import importlib.util
import os
import sys


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        cand = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(cand):
            spec = importlib.util.spec_from_file_location("_commtrace_chained_sitecustomize", cand)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return


if os.environ.get("COMMTRACE_DIR"):
    try:
        from commtrace.capture import activate as _activate
        _activate.activate_from_env()
    except Exception as exc:  # never break the child for the tracer's sake
        sys.stderr.write(f"commtrace: tracing disabled in pid {os.getpid()}: {exc}\n")
_chain()
