"""Keep commtrace's wrapper frames out of the traced program's tracebacks.

commtrace wraps torch functions (phase scopes, object collectives, group
creation, the spawn entry point, the Python ProcessGroup wrapper). Without
care, an exception raised through one of them carries the wrapper's frame, and
the traceback the program prints, logs, or that torch formats for a spawned
rank's parent shows a ``commtrace/...`` line it would not show untraced.
"""
from __future__ import annotations

import sys


def drop_own_frame(exc: BaseException) -> None:
    """Call in a wrapper's ``except`` clause, right before a bare ``raise``:
    removes the wrapper's own frame (the caller's) from the head of ``exc``'s
    traceback. A bare ``raise`` adds no frame back, so the exception continues
    as if the wrapper were not there. Runs only when an exception passes."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        exc.__traceback__ = tb.tb_next
