"""Signal handlers commtrace installs (SIGTERM, SIGUSR1 and the wakeup fd: see watchdog), as the
program sees them: not at all. Once one of ours is installed, ``getsignal(s)`` answers the handler
ours replaced (``SIG_DFL``) while ours is in place; ``signal(s, h)`` installs ``h`` (the program's
handler gets its signals, ours is gone) and answers the handler the program would have replaced, and
setting back the one ours replaced puts ours back; ``set_wakeup_fd(fd)`` likewise: the program's fd
replaces ours, -1 puts ours back, and the answer is what the program's previous call set (-1).

``deferred`` holds the program's Python handlers of SIGINT, SIGTERM and of every signal the program
gave one (a progress ``setitimer`` left armed at exit: SIGALRM) while the main thread writes the
trace (a ``KeyboardInterrupt``, a handler's ``sys.exit`` or its own exception, raised there would
lose what it writes) and runs them after.

A program's handler for one of these signals runs counted (``runs``): the signal thread reads
each delivery from the wakeup fd, possibly late, when the program may already have handled it
and put ours back; it must not then act as if the main thread were stuck.
"""
from __future__ import annotations

import contextlib
import functools
import signal
import threading

real_getsignal = signal.getsignal
real_signal = signal.signal
real_set_wakeup_fd = signal.set_wakeup_fd

_ours: dict[int, tuple] = {}  # signum -> (our handler, the handler it replaced)
_wakeup: dict = {}            # "fd": our wakeup fd while it is installed; "program": the program's in its place
_runs: dict[int, int] = {}    # signum -> runs of the program's handlers for a signal we handle too
_program_handled: set = set()  # signals the program gave a Python handler (signal.signal)


def runs(signum: int) -> int:
    """How many times the main thread ran a program's handler for ``signum``."""
    return _runs.get(int(signum), 0)


def _counted(handler):
    if not callable(handler):
        return handler

    def counted(signum, frame):
        _runs[signum] = _runs.get(signum, 0) + 1
        return handler(signum, frame)
    counted.commtrace_program_handler = handler
    return counted


def _program_view(handler):
    return getattr(handler, "commtrace_program_handler", handler)


def install(signum: int, handler) -> None:
    """Install our ``handler`` for ``signum`` (main thread only)."""
    prev = real_signal(signum, handler)
    _ours[int(signum)] = (handler, prev)
    _wrap()


def uninstall(signum: int) -> None:
    """Back to the default action (ours only ever replaces it), e.g. before re-raising the signal."""
    entry = _ours.pop(int(signum), None)
    if entry is not None and real_getsignal(signum) is entry[0]:
        real_signal(signum, signal.SIG_DFL)


def set_our_wakeup_fd(fd: int) -> int:
    prev = real_set_wakeup_fd(fd, warn_on_full_buffer=False)
    if prev == -1:
        _wakeup["fd"] = fd
        _wrap()
    return prev


def wakeup_is_ours() -> bool:
    """Whether signals' numbers go to our wakeup fd now (not the program's, asyncio's)."""
    return "fd" in _wakeup and "program" not in _wakeup


_held: list = []   # signals that arrived inside ``deferred``, in order: (signum, frame)
_NO_HOLD = contextlib.nullcontext()


def deferred(signums=None):
    """In the main thread, the program's Python handlers of ``signums`` (default: SIGINT, SIGTERM
    and those the program installed) run when the block has
    ended, in arrival order, instead of at a bytecode inside it (their exception, a
    KeyboardInterrupt or a handler's SystemExit, is then raised from here); commtrace's own stay
    (watchdog's SIGTERM handler knows where it runs). Nested blocks: the outermost runs them.
    Other threads: nothing (no handler runs there; the flush thread pays one test per flush)."""
    if _held or threading.get_ident() != threading.main_thread().ident:
        return _NO_HOLD
    return _holding(_ALWAYS_HELD.union(_program_handled) if signums is None else signums)


_ALWAYS_HELD = frozenset((signal.SIGINT, signal.SIGTERM))
_to_close: list = []   # the hold ``hold_to_close`` opened, until ``release``


def hold_to_close() -> None:
    """``deferred`` from the script's end until ``release`` (the trace's exit close): a handler the
    program left firing (a timer armed at exit) can otherwise raise in any of commtrace's code between
    the two, before the close itself holds it, and so lose the close."""
    hold = deferred()
    if hold is not _NO_HOLD:
        hold.__enter__()
        _to_close.append(hold)


def release() -> None:
    """Ends ``hold_to_close``'s hold: the program's held handlers run now (their exception raised here)."""
    while _to_close:
        _to_close.pop().__exit__(None, None, None)


@contextlib.contextmanager
def _holding(signums):
    _held.append(None)   # the block is open (a marker, never run)
    saved = {}
    try:
        for s in signums:
            h = real_getsignal(s)
            if callable(h) and h is not _ours.get(s, (None,))[0]:
                saved[s] = h
                real_signal(s, _hold)
        yield
    finally:
        for s, h in saved.items():
            if real_getsignal(s) is _hold:
                real_signal(s, h)
        arrived = _held[1:]
        _held.clear()
        for signum, frame in arrived:
            saved[signum](signum, frame)


def _hold(signum, frame):
    _held.append((signum, frame))


def after_fork_in_child() -> bool:
    """A forked child's wakeup fd, if ours, is its parent's pipe: none instead (the program's
    own stays); its parent's handler runs are not its own. Returns whether ours was installed."""
    _runs.clear()
    ours = _wakeup.pop("fd", None)
    _wakeup.pop("program", None)
    if ours is None:
        return False
    prev = real_set_wakeup_fd(-1)
    if prev != ours:
        real_set_wakeup_fd(prev)
    return prev == ours


def _getsignal(signalnum):
    h = real_getsignal(signalnum)
    entry = _ours.get(int(signalnum))
    return entry[1] if entry is not None and h is entry[0] else _program_view(h)


def _signal(signalnum, handler):
    if callable(handler):
        _program_handled.add(int(signalnum))
    entry = _ours.get(int(signalnum))
    if entry is None:
        prev = real_signal(signalnum, handler)
    elif handler is entry[1] or handler == entry[1]:
        prev = real_signal(signalnum, entry[0])  # the program restores "its" default: ours comes back
    else:
        prev = real_signal(signalnum, _counted(handler))
    return entry[1] if entry is not None and prev is entry[0] else _program_view(prev)


def _set_wakeup_fd(fd, /, *, warn_on_full_buffer=True):
    ours = _wakeup.get("fd")
    if ours is None:
        return real_set_wakeup_fd(fd, warn_on_full_buffer=warn_on_full_buffer)
    if fd == -1:
        prev = real_set_wakeup_fd(ours, warn_on_full_buffer=False)
        _wakeup.pop("program", None)
    else:
        prev = real_set_wakeup_fd(fd, warn_on_full_buffer=warn_on_full_buffer)
        _wakeup["program"] = fd
    return -1 if prev == ours else prev


def _wrap() -> None:
    if signal.getsignal is not real_getsignal:
        return
    signal.getsignal = functools.wraps(real_getsignal)(_getsignal)
    signal.signal = functools.wraps(real_signal)(_signal)
    signal.set_wakeup_fd = functools.wraps(real_set_wakeup_fd)(_set_wakeup_fd)
