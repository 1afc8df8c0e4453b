"""Analysis subcommands for the CLI. ``commtrace.cli`` calls ``add_parsers(subparsers)``.

To add a command, write a module with ``add_parser(subparsers)`` (which calls
``set_defaults(handler=fn)``, ``fn(ns) -> int``) and list it in ``COMMAND_MODULES``.
Modules that do not exist (yet) are skipped.
"""
from __future__ import annotations

import importlib
import re
import sys

COMMAND_MODULES = [
    "commtrace.render.cmd_report",
    "commtrace.render.cmd_compare",
    "commtrace.render.cmd_check",
]


def add_parsers(subparsers) -> None:
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        mod.add_parser(subparsers)


def warn(message: str) -> None:
    """One warning line on stderr (trace strings already made printable by the caller)."""
    from .fmt import plain_safe
    print(f"commtrace: warning: {plain_safe(message)}", file=sys.stderr)


# A reader issue about one rank's file, as TraceIssue writes it: "FILE (rank R): PROBLEM".
_RANK_ISSUE = re.compile(r"^\S+ \(rank (\d+)\): (.*)$", re.S)


def warn_issues(issues) -> None:
    """The reader's issues (TraceIssue or its text), one warning line each -- except that
    one problem on many ranks' files is one line naming the ranks ("rank 512-1023 (512
    files): trace ends abruptly ..."), so the warnings do not grow with the rank count."""
    from ..analysis.rank_ranges import fmt_ranks
    parsed = [(str(i), _RANK_ISSUE.match(str(i))) for i in issues]
    ranks_of: dict[str, list] = {}   # problem -> the ranks whose files have it
    for _, m in parsed:
        if m:
            ranks_of.setdefault(m.group(2), []).append(int(m.group(1)))
    for text, m in parsed:
        if not m:
            warn(text)
            continue
        ranks = ranks_of.pop(m.group(2), None)
        if ranks is not None:   # None: told with the first file that has it
            warn(text if len(ranks) == 1 else f"rank {fmt_ranks(ranks)} ({len(ranks)} files): {m.group(2)}")
