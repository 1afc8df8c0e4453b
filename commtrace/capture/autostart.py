"""``COMMTRACE=1`` (README, "Python API"): imported at interpreter start by the
``commtrace-autostart.pth`` that commtrace/_install_pth.py installs, only when ``COMMTRACE`` is
true; starts tracing as ``commtrace.start()`` does, with the options from the environment. Any
error is one line on stderr, and the program runs untraced.
"""
from __future__ import annotations

import atexit
import os
import sys


def _is_commtrace_cli() -> bool:
    """``python -m commtrace ...`` or the ``commtrace`` console script: never traced."""
    args = list(getattr(sys, "orig_argv", None) or sys.argv)[1:]
    skip = False
    for i, a in enumerate(args):
        if skip:  # the value of -X / -W
            skip = False
        elif a in ("-X", "-W"):
            skip = True
        elif a == "-m":
            return i + 1 < len(args) and args[i + 1].split(".")[0] == "commtrace"
        elif a.startswith("-m"):
            return a[2:].split(".")[0] == "commtrace"
        elif a == "-c" or not a.startswith("-"):
            return os.path.basename(a) == "commtrace"  # the console script, or a program of the user's
    return False


def _say_where(session, pid: int) -> None:
    """At exit, where the trace went: in the process that began the run (``pid``: not a child it forked,
    which inherits this handler), if rank 0 or none."""
    from . import activate
    rec = activate.active_recorder()
    if os.getpid() != pid or rec is None or rec.rank not in (0, None):
        return
    from .launch import say_where
    say_where(session.run_dir)


def enabled(env) -> bool:
    """``COMMTRACE`` is true: the rule the .pth line applies, asked again here because a
    tool may import this module by name (pydoc, an import sweep) without it."""
    return env.get("COMMTRACE", "0").strip().lower() not in ("", "0", "false", "no", "off")


def main() -> None:
    if not enabled(os.environ) or _is_commtrace_cli():
        return
    try:
        from . import bounded, session
        env = os.environ
        bounded.options_from_env(env)  # a bad value: its variable named in the one line below
        abort = env.get("COMMTRACE_ABORT_ON_HANG", "0") == "1"
        s = session.start(keep_last=env.get("COMMTRACE_KEEP_LAST") or None, steps=env.get("COMMTRACE_STEPS") or None,
                          hang_timeout=env.get("COMMTRACE_HANG_TIMEOUT") or None, abort_on_hang=abort)
        if s.started:
            atexit.register(_say_where, s, os.getpid())
    except Exception as exc:  # never break the program for the tracer's sake
        sys.stderr.write(f"commtrace: COMMTRACE is set but tracing did not start in pid {os.getpid()}: {exc}\n")


main()
