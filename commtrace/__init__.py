"""commtrace: a communication tracer for torch.distributed.

Capture (``commtrace run``) -> trace files (``commtrace.trace``) -> analysis
(``commtrace.analysis``) -> rendering (``commtrace.render``).
"""
__version__ = "0.1.0"

__all__ = ["__version__", "load", "scan", "region", "mark", "start", "stop"]


def load(run_dir=None, table: str = "ops", **kwargs):
    """One table of a run directory as a pandas DataFrame (times on rank 0's clock):

    ``ops`` (default): one row per op per rank; ``spans``: compute spans (DDP forward,
    backward, optimizer step); ``marks``: ``commtrace.mark``; ``regions``:
    ``commtrace.region``; ``counts``: bounded mode's counted ops; ``steps``: one row
    per step and rank with the report's step figures (docs/report.md).
    """
    from .trace.reader import TABLES
    if table not in (*TABLES, "steps"):
        from .errors import CommtraceError
        raise CommtraceError(f"table {table!r}: unknown (one of {', '.join(TABLES)}, steps)")
    if table == "steps":
        from .analysis.partitioned import steps_table
        return steps_table(run_dir)
    from .trace.reader import load as _load
    return _load(run_dir, table=table, **kwargs)


def scan(run_dir=None):
    """A run too big for one frame, one lazy part per rank: ``part.load()`` is that rank's
    ops as ``load`` has them (e.g. ``dask.delayed(part.load)()`` per part). The report's own
    figures of such runs: ``commtrace report --partitioned`` (docs/report.md, "Big runs")."""
    from .analysis.partitioned import scan as _scan
    return _scan(run_dir)


def region(label: str):
    """``with commtrace.region("eval"): ...`` labels the ops inside. No-op when not tracing."""
    from .capture.annotate import region as _region
    return _region(label)


def mark(label: str) -> None:
    """Put a labelled instant in the trace (e.g. ``commtrace.mark("epoch 3")``). No-op when not tracing."""
    from .capture.annotate import mark as _mark
    _mark(label)


def start(out_dir=None, keep_last=None, steps=None, hang_timeout=None, abort_on_hang=False):
    """Trace this process (and the Python processes it starts) from now on, as ``commtrace run``
    would, for jobs it does not launch.

    Groups made later are traced when created; groups that exist already are traced from now on
    (after ``init_process_group`` every rank must call it, at the same point). ``keep_last=N`` keeps
    the last N ops per process; ``steps``: "A:B", "A", "A:", ":B" or "every:K", the optimizer steps
    written in full (others are counted); ``hang_timeout``: dump in-flight ops and stacks when an op
    runs longer (s; ``abort_on_hang``: then exit with 3). Returns a session: ``.run_dir``, and
    ``with commtrace.start(): ...`` stops at the end of the block. Already tracing: returns that
    session, unchanged. Raises ValueError for a bad option.
    """
    from .capture.session import start as _start
    return _start(out_dir=out_dir, keep_last=keep_last, steps=steps, hang_timeout=hang_timeout,
                  abort_on_hang=abort_on_hang)


def stop():
    """Stop tracing (flush and close, as at exit); returns the run directory, or None
    when not tracing. ``start()`` may trace again later, into new files."""
    from .capture.session import stop as _stop
    return _stop()
