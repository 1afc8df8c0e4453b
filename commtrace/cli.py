"""Command line: thin argument parsing over capture, analysis and rendering.

Exit codes: 0 success; 1 ``check`` found problems; 2 bad input or usage;
``run`` passes the traced script's own exit code through.
"""
from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import EXIT_USAGE, CommtraceError, report

RUN_EPILOG = """\
examples:
  mpirun -n 2 python -m commtrace run train.py --epochs 3
  srun -n 4 python -m commtrace run train.py
  torchrun --nproc_per_node 2 -m commtrace run train.py
  python -m commtrace run train_that_calls_mp_spawn.py
  python -m commtrace run -o runs/exp1 -m mypkg.train
  python -m commtrace run --keep-last 100000 train.py        # bounded: the last 100000 ops per process
  python -m commtrace run --steps 10000:10010 train.py       # full detail for 11 steps, counts elsewhere

The script is not modified. All ranks write into one run directory: -o DIR, or
./commtrace-out/<YYYYmmdd-HHMMSS>-<6 hex>/ under every launcher; rank 0 says
where on stderr at the end. The exit code is the script's exit code.

Bounded, always-on mode: --keep-last N keeps the last N ops (and compute
spans) per process in a ring of two file segments (at most 2N x 32 bytes
each); --steps A:B (or A, or every:K) writes ops in full only during those
optimizer steps and counts the others per group and op (ops, bytes, time).
Hang, signal, exception and exit dumps work as without them.
"""

TOP_EPILOG = """\
commands:
  run       trace an unmodified script        (commtrace run train.py)
  report    summarize a run in the terminal   (commtrace report [RUN_DIR])
  compare   compare runs side by side         (commtrace compare BASE EXP ...)
  check     diagnose hangs, desyncs, crashes  (commtrace check [RUN_DIR])
  build-native  compile the optional C++ fast paths (make setup runs it)

exit codes: 0 ok, 1 problems found (check), 2 bad input; run: the script's code.
"""


def _run_parser(sub) -> None:
    p = sub.add_parser("run", help="trace an unmodified script", epilog=RUN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       usage="commtrace run [-o DIR] [--hang-timeout S [--abort-on-hang]] [--keep-last N] "
                             "[--steps A:B|every:K] [--no-launcher-env] (-m MODULE | SCRIPT) [ARGS...]")
    p.add_argument("-o", "--output", metavar="DIR", help="run directory (default ./commtrace-out/<run-id>)")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module as __main__, like python -m")
    p.add_argument("--hang-timeout", type=float, metavar="SECONDS",
                   help="dump in-flight ops and stacks when an op runs longer than this")
    p.add_argument("--abort-on-hang", action="store_true", help="exit non-zero after a hang dump")
    p.add_argument("--keep-last", metavar="N", help="bounded mode: keep only the last N ops per process (a ring)")
    p.add_argument("--steps", metavar="A:B|every:K",
                   help="bounded mode: write ops in full only during these optimizer steps; count the others")
    p.add_argument("--no-launcher-env", dest="launcher_env", action="store_false",
                   help="leave RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT unset under mpirun and srun "
                        "(also COMMTRACE_LAUNCHER_ENV=0)")
    p.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT [ARGS...] (or ARGS... with -m)")


def _build_native_parser(sub) -> None:
    p = sub.add_parser("build-native", help="compile the optional C++ fast paths",
                       description="Compile commtrace's optional C++ extensions for the installed torch: the "
                       "native wrapper for CPU groups, the analysis kernels (report, compare, check) and, when "
                       "mpi4py's MPI has headers, the mpi backend's fast path. Without them commtrace uses its Python code (slower per op). Exit code 1 "
                       "if one failed to build.",
                       epilog="example:\n  commtrace build-native\n\nCOMMTRACE_NATIVE=0 disables the "
                       "extensions at run time; COMMTRACE_NATIVE_DIR sets where they are built.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="print the compiler command lines")
    p.set_defaults(handler=_cmd_build_native)


def _cmd_build_native(ns) -> int:
    import time

    from . import native
    failed = 0
    for label, ext in native.extensions():
        if ext is None:
            print(f"{label}: skipped (nothing to build it with here)")
            continue
        t = time.monotonic()
        try:
            path = native.build(ext, verbose=ns.verbose)
        except native.NativeBuildError as e:
            print(f"{label}: not built: {e}")
            failed += 1
            continue
        print(f"{label}: {path} ({time.monotonic() - t:.0f} s)")
    return 1 if failed else 0


def _add_analysis_parsers(sub) -> None:
    try:
        from .render import cli_commands
    except ImportError:
        return
    cli_commands.add_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="commtrace", description="Communication tracer for torch.distributed.",
                                     epilog=TOP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"commtrace {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _run_parser(sub)
    _add_analysis_parsers(sub)
    _build_native_parser(sub)
    return parser


def _cmd_run(ns) -> int:
    from .capture.bounded import make_options
    from .capture.runner import RunOptions, missing_target, run
    try:
        bounded = make_options(ns.keep_last, ns.steps)
    except ValueError as e:
        raise CommtraceError(f"run: --{str(e).replace('_', '-', 1)}") from None
    args = list(ns.target)
    common = dict(output=ns.output, hang_timeout=ns.hang_timeout, abort_on_hang=ns.abort_on_hang, bounded=bounded,
                  launcher_env=ns.launcher_env)
    if ns.module:
        opts = RunOptions(target=ns.module, args=args, is_module=True, **common)
    else:
        if args and args[0] == "--":
            args = args[1:]
        if not args:
            raise CommtraceError("run: no script given (usage: commtrace run SCRIPT [ARGS...] or -m MODULE)")
        opts = RunOptions(target=args[0], args=args[1:], **common)
    why = missing_target(opts)  # before anything runs or is written
    if why:
        raise CommtraceError(f"run: {why}")
    return run(opts)


def _run_options(parser: argparse.ArgumentParser) -> tuple[set, set]:
    """(options of ``run`` that take a value, those that do not), read off its parser."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    with_value, flags = set(), set()
    for action in sub.choices["run"]._actions:
        (flags if action.nargs == 0 else with_value).update(action.option_strings)
    return with_value, flags


def split_run_argv(args: list[str], parser: argparse.ArgumentParser | None = None) -> tuple[list[str], list[str]]:
    """(``run``'s own arguments, the target and its arguments).

    Everything from the script (or after -m MODULE) on is the target's, even when
    it looks like an option (``-m pytest -p no:x -v``), as with ``python -m``:
    argparse's REMAINDER would claim a leading ``-p`` as run's own.
    """
    with_value, flags = _run_options(parser or build_parser())
    i = 0
    while i < len(args):
        a = args[i]
        if a in flags:
            i += 1
            continue
        name = a.split("=", 1)[0] if a.startswith("--") else a[:2]
        if name not in with_value:
            break
        # "-o DIR" / "--output=DIR" / "-oDIR"
        inline = "=" in a if a.startswith("--") else len(a) > 2
        i += 1 if inline else 2
        if name == "-m":
            break
    return args[:i], args[i:]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":
        head, target = split_run_argv(argv[1:], parser)
        ns = parser.parse_args(["run", *head])
        ns.target = target
    else:
        ns = parser.parse_args(argv)
    if not ns.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        if ns.command == "run":
            return _cmd_run(ns)
        return ns.handler(ns)
    except CommtraceError as e:
        return report(e)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
