"""Warnings the commands print about the trace files, one line each on stderr."""
from __future__ import annotations

import sys


def warn(message: str) -> None:
    """One warning line on stderr (trace strings already made printable by the caller)."""
    from ..render.fmt import plain_safe
    print(f"commtrace: warning: {plain_safe(message)}", file=sys.stderr)


# Warning lines about the trace files printed at most (problems that differ per file, e.g. each names
# its file): then one line with how many more.
WARNINGS_SHOWN = 16


def warn_issues(issues) -> None:
    """The reader's issues, one warning line per problem (``trace.issues.fold_issues``: "rank
    512-1023 (512 files): ..."), at most ``WARNINGS_SHOWN``: they do not grow with the ranks."""
    from ..trace.issues import fold_issues, issue_line
    lines = [issue_line(alike) for alike in fold_issues(issues)]
    for line in lines[:WARNINGS_SHOWN]:
        warn(line)
    if len(lines) > WARNINGS_SHOWN:
        warn(f"... and {len(lines) - WARNINGS_SHOWN} more problems with the trace files (commtrace check names each)")
