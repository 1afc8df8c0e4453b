"""Keep commtrace's wrapper frames out of the traced program's tracebacks: an exception
raised through a wrapped torch function must not show a ``commtrace/...`` line."""
from __future__ import annotations

import sys


def drop_own_frame(exc: BaseException) -> None:
    """In a wrapper's ``except`` clause, right before a bare ``raise`` (which adds no frame
    back): removes the wrapper's own frame from the head of ``exc``'s traceback."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        exc.__traceback__ = tb.tb_next
