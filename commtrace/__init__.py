"""commtrace: a communication tracer for torch.distributed.

Capture (``commtrace run``) -> trace files (``commtrace.trace``) -> analysis
(``commtrace.analysis``) -> rendering (``commtrace.render``).
"""
__version__ = "0.1.0"

__all__ = ["__version__", "load", "region", "mark"]


def load(run_dir=None, **kwargs):
    """Load a run directory into a pandas DataFrame (one row per op per rank)."""
    from .trace.reader import load as _load
    return _load(run_dir, **kwargs)


def region(label: str):
    """``with commtrace.region("eval"): ...`` labels the ops inside. No-op when not tracing."""
    from .capture.annotate import region as _region
    return _region(label)


def mark(label: str) -> None:
    """Put a labelled instant in the trace (e.g. ``commtrace.mark("epoch 3")``). No-op when not tracing."""
    from .capture.annotate import mark as _mark
    _mark(label)
