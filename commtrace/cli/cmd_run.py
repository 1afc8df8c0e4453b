"""``commtrace run [options] (-m MODULE | SCRIPT) [ARGS...]``: trace an unmodified script.

Its exit code is the script's; 2 when the command line or the target is unusable.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

from ..errors import CommtraceError
from .options import unknown_option

RUN_EPILOG = """\
examples:
  mpirun -n 2 python -m commtrace run train.py --epochs 3
  srun -n 4 python -m commtrace run train.py
  torchrun --nproc_per_node 2 -m commtrace run train.py
  python -m commtrace run torchrun --nproc_per_node 2 train.py   # a Python launcher on PATH runs traced
  python -m commtrace run train_that_calls_mp_spawn.py
  commtrace run python train.py                             # this python's name before the script is dropped
  python -m commtrace run -o runs/exp1 -m mypkg.train
  python -m commtrace run --keep-last 100000 train.py        # bounded: the last 100000 ops per process
  python -m commtrace run --steps 10000:10010 train.py       # full detail for 11 steps, counts elsewhere

The script is not modified. All ranks write into one run directory: -o DIR, or
./commtrace-out/<YYYYmmdd-HHMMSS>-<6 hex>/ under every launcher; rank 0 says
where on stderr at the end (under mpirun also at the start). Options before the
script are run's; from the script on, every argument is the script's. The exit
code is the script's exit code. SCRIPT may name a Python program on PATH
(torchrun, accelerate, deepspeed): it runs as that script, and the ranks it
starts are traced as its children.

Bounded, always-on mode: --keep-last N keeps the last N ops (and compute
spans) per process in a ring of two file segments (at most 2N x 32 bytes
each); --steps A:B (or A, A:, :B, every:K) writes ops in full only during those
optimizer steps and counts the others per group and op (ops, bytes, time).
Hang, signal, exception and exit dumps work as without them.
"""

def add_parser(sub) -> None:
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
    p.set_defaults(handler=run_run)


# Python's own options whose value is the next word (`python -X dev x.py`): the advice names both.
_PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def _this_python(name: str) -> bool:
    """``name`` (as typed: "python3", a path) is the interpreter running commtrace: it is dropped from the
    command, as a profiler's `prof python train.py` reads. Another interpreter is a program like any
    other (it would not have commtrace's tracing on: missing_target says how to start it)."""
    if not os.path.basename(name).startswith("python"):
        return False
    path = name if os.sep in name else shutil.which(name)
    # the same directory too: another venv's python is a link to the same interpreter, with other packages
    return bool(path) and os.path.dirname(os.path.abspath(path)) == os.path.dirname(os.path.abspath(sys.executable)) \
        and os.path.realpath(path) == os.path.realpath(sys.executable)


def run_run(ns) -> int:
    from ..capture.bounded import make_options
    from ..capture.runner import RunOptions, missing_target, python_command, run
    try:
        bounded = make_options(ns.keep_last, ns.steps, names=("--keep-last", "--steps"))
    except ValueError as e:
        raise CommtraceError(f"run: {e}") from None
    args = list(ns.target)
    common = dict(output=ns.output, hang_timeout=ns.hang_timeout, abort_on_hang=ns.abort_on_hang, bounded=bounded,
                  launcher_env=ns.launcher_env)
    if not ns.module and args and args[0] == "--":
        args = args[1:]
    if not ns.module and args and _this_python(args[0]):   # `commtrace run python [-m MODULE | SCRIPT] ...`
        python, args = args[0], args[1:]
        if args[:1] == ["-m"] and len(args) > 1:
            ns.module, args = args[1], args[2:]
        elif args and args[0] == "-c":
            raise CommtraceError("run: python -c CODE is not taken here: commtrace runs a script or -m MODULE "
                                 "(put the code in a file)")
        elif args and args[0].startswith("-"):
            option = " ".join(args[:2]) if args[0] in _PYTHON_OPTIONS_WITH_VALUE else args[0]
            raise CommtraceError(f"run: python's own option {option} is not taken here; give it to the python that "
                                 f"runs commtrace ({python} {option} -m commtrace run SCRIPT)")
    if ns.module:
        opts = RunOptions(target=ns.module, args=args, is_module=True, **common)
    else:
        if not args:
            raise CommtraceError("run: no script given (usage: commtrace run SCRIPT [ARGS...] or -m MODULE)")
        opts = RunOptions(target=python_command(args[0]) or args[0], args=args[1:], **common)
    why = missing_target(opts)  # before anything runs or is written
    if why:
        raise CommtraceError(f"run: {why}")
    return run(opts)


def _run_options(parser: argparse.ArgumentParser | None) -> tuple[set, set]:
    """(options of ``run`` that take a value, those that do not), read off its parser."""
    if parser is None:
        parser = argparse.ArgumentParser(prog="commtrace")
        add_parser(parser.add_subparsers())
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    with_value, flags = set(), set()
    for action in sub.choices["run"]._actions:
        (flags if action.nargs == 0 else with_value).update(action.option_strings)
    return with_value, flags


def _known_option(arg: str, options: set) -> str:
    """The option ``arg`` names (or the one long option it abbreviates, as argparse allows); else a
    CommtraceError naming the likeliest: an unknown option before the script is a typo."""
    name = arg.split("=", 1)[0]
    if name in options:
        return name
    if name.startswith("--"):
        longer = [o for o in options if o.startswith(name)]
        if len(longer) == 1:
            return longer[0]
    e = unknown_option("run", name, options)
    raise CommtraceError(f"{e}; options after the script are the script's") from None


def split_run_argv(args: list[str], parser: argparse.ArgumentParser | None = None) -> tuple[list[str], list[str]]:
    """(``run``'s own arguments, the target and its arguments). From the script (or after -m
    MODULE) on, everything is the target's (``-m pytest -p no:x``), as with ``python -m``, where
    argparse's REMAINDER would claim ``-p``; before it, an unknown option is a CommtraceError."""
    with_value, flags = _run_options(parser)
    head = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--" or not a.startswith("-") or a == "-":
            break
        name = _known_option(a if a.startswith("--") else a[:2], with_value | flags)
        if a.startswith("--"):
            a = name + a[len(a.split("=", 1)[0]):]    # an abbreviation spelt out, as argparse reads it
        # a flag, or an option with its value: "-o DIR" / "--output=DIR" / "-oDIR"
        inline = name in flags or ("=" in a if a.startswith("--") else len(a) > 2)
        head.extend([a] if inline else [a, *args[i + 1:i + 2]])
        i += 1 if inline else 2
        if name == "-m":
            break
    return head, args[i:]
