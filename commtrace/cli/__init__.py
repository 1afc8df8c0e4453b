"""Command line: one module per command parses its arguments and calls capture,
analysis and rendering (``commtrace.cli.main`` is the entry point).

Exit codes: 0 success; 1 ``check`` found problems; 2 bad input or usage;
``run`` passes the traced script's own exit code through.
"""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from .. import errors
from ..errors import EXIT_USAGE, CommtraceError
from . import cmd_build_native, cmd_check, cmd_compare, cmd_report, cmd_run
from .options import unknown_option
from .cmd_run import split_run_argv

TOP_EPILOG = """\
commands:
  run       trace an unmodified script        (commtrace run train.py)
  report    summarize a run in the terminal   (commtrace report [RUN_DIR])
  compare   compare runs side by side         (commtrace compare BASE EXP ...)
  check     diagnose hangs, desyncs, crashes  (commtrace check [RUN_DIR])
  build-native  compile the optional C++ fast paths (make setup runs it)

exit codes: 0 ok, 1 problems found (check), 2 bad input; run: the script's code.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="commtrace", description="Communication tracer for torch.distributed.",
                                     epilog=TOP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"commtrace {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (cmd_run, cmd_report, cmd_compare, cmd_check, cmd_build_native):
        command.add_parser(sub)
    return parser


def _known_command(parser: argparse.ArgumentParser, name: str) -> None:
    """CommtraceError (exit 2, one line) unless ``name`` is a command, naming the closest one."""
    import difflib
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if name in sub.choices:
        return
    close = difflib.get_close_matches(name, list(sub.choices), n=1)
    hint = f"did you mean {close[0]}?" if close else "commands: " + ", ".join(sub.choices)
    raise CommtraceError(f"unknown command {name!r} ({hint})")


def _unexpected(parser: argparse.ArgumentParser, command: str, arg: str) -> CommtraceError:
    """The one-line error for the first argument ``command`` does not take (exit 2)."""
    if not arg.startswith("-") or arg == "-":
        return CommtraceError(f"{command}: unexpected argument {arg!r} (commtrace {command} -h shows its usage)")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = {o for action in sub.choices[command]._actions for o in action.option_strings}
    return unknown_option(command, arg.split("=", 1)[0], options)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and not argv[0].startswith("-"):
            _known_command(parser, argv[0])
        if argv and argv[0] == "run":
            head, target = split_run_argv(argv[1:], parser)
            ns = parser.parse_args(["run", *head])
            ns.target = target
        else:
            ns, extra = parser.parse_known_args(argv)
            if extra:
                raise _unexpected(parser, ns.command, extra[0])
        if not ns.command:
            parser.print_help()
            return EXIT_USAGE
        return ns.handler(ns)
    except CommtraceError as e:
        return errors.report(e)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
