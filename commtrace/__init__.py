"""commtrace: a communication tracer for torch.distributed.

Capture (``commtrace run``) -> trace files (``commtrace.trace``) -> analysis
(``commtrace.analysis``) -> rendering (``commtrace.render``).
"""
__version__ = "0.1.0"

__all__ = ["__version__", "load", "region", "mark"]


def load(run_dir=None, table: str = "ops", **kwargs):
    """One table of a run directory as a pandas DataFrame (times on rank 0's clock):

    ``ops`` (default): one row per op per rank; ``spans``: compute spans (DDP forward,
    backward, optimizer step); ``marks``: ``commtrace.mark``; ``regions``:
    ``commtrace.region``; ``steps``: one row per step and rank with the report's
    step figures (docs/report.md).
    """
    if table == "steps":
        from .analysis.report import build_report
        from .analysis.run_info import load_report_run
        from .analysis.step_table import PER_RANK_COLUMNS
        import pandas as pd
        rep = build_report(load_report_run(run_dir))
        return rep.steps.per_rank if rep.steps is not None else pd.DataFrame(columns=PER_RANK_COLUMNS)
    from .trace.reader import load as _load
    return _load(run_dir, table=table, **kwargs)


def region(label: str):
    """``with commtrace.region("eval"): ...`` labels the ops inside. No-op when not tracing."""
    from .capture.annotate import region as _region
    return _region(label)


def mark(label: str) -> None:
    """Put a labelled instant in the trace (e.g. ``commtrace.mark("epoch 3")``). No-op when not tracing."""
    from .capture.annotate import mark as _mark
    _mark(label)
