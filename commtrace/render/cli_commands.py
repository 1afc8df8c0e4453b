"""Analysis subcommands for the CLI. ``commtrace.cli`` calls ``add_parsers(subparsers)``.

To add a command, write a module with ``add_parser(subparsers)`` (which calls
``set_defaults(handler=fn)``, ``fn(ns) -> int``) and list it in ``COMMAND_MODULES``.
Modules that do not exist (yet) are skipped.
"""
from __future__ import annotations

import importlib
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
