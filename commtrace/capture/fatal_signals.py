"""Fatal signals (SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL) end the trace before the process
dies: the ops since the last flush and an end record ``how: "signal"``, ``exit_code``
128 + N. The native handler (``native/fatal_signals.cpp``) wakes the ``commtrace-fatal``
thread here, which writes a state dump (``watchdog.dump``: every thread's stack, the ops in
flight) and closes the recorder, and lets the signal go on once it has, or after
``WAIT_S``: the process dies by the same signal as untraced. docs/faults.md.

Armed when the process gets its files of a rank (``Recorder._open``): after
``init_process_group``, so a library that installs its own handlers only where none is
(Open MPI's stack traces, at ``MPI_Init``) has done so by then, and ours passes the signal
on to it. Not where the program handles the signal in Python then (it may survive one it
sends itself), nor where it is ignored. Needs the extension (not with ``COMMTRACE_NATIVE=0``).
"""
from __future__ import annotations

import os
import signal
import time

from .. import native
from . import sigview, threads, watchdog
from .native_ext import FATAL_SIGNALS

SIGNALS = (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)
WAIT_S = 2.0   # longest a dying process waits for its trace to close
DESCRIBE_S = 0.5   # of which at most this for ops just issued to be described (_let_describe)

_state: dict = {}   # "rec": the recorder to close; "pid", "fds": this process's pipes once armed


def arm(rec) -> bool:
    """Close ``rec`` on a fatal signal of this process; False where the handler is not built."""
    _state["rec"] = rec
    if _state.get("pid") == os.getpid():
        return True
    mod = native.load(FATAL_SIGNALS)
    if mod is None:
        return False
    wake_r, wake_w = os.pipe()
    answer_r, answer_w = os.pipe()
    # A signal the program handles in Python it may well survive (one it sends itself): its own.
    mine = [int(s) for s in SIGNALS if not callable(sigview.real_getsignal(s))]
    try:
        mod.arm(wake_w, answer_r, int(WAIT_S * 1000), mine)
    except Exception:
        for fd in (wake_r, wake_w, answer_r, answer_w):
            os.close(fd)
        raise
    for fd in _state.get("fds", ()):   # a forked child's copies of its parent's pipes
        os.close(fd)
    _state.update(pid=os.getpid(), fds=(wake_r, wake_w, answer_r, answer_w))
    threads.start(_close_on_signal, "commtrace-fatal", wake_r, answer_w)
    return True


def _close_on_signal(wake_r: int, answer_w: int) -> None:
    data = os.read(wake_r, 1)
    if not data:
        return
    try:
        rec = _state.get("rec")
        if rec is not None:
            _let_describe(rec)
            # where each thread was (the crashing one inside the call that crashed) and the ops in
            # flight, as a SIGTERM dumps them: `commtrace check` shows the rank's position from it
            watchdog.dump_once(rec, signal.Signals(data[0]).name)
            rec.close(exit_code=128 + data[0], how="signal")
    finally:
        os.write(answer_w, b"\0")


def _let_describe(rec) -> None:
    """The native wrapper looks a gloo or NCCL op's sig up after issuing it, on its thread,
    under the GIL: the op issued just before the signal (the one gloo aborts on) is written
    once that thread has, which it does as soon as it gets the GIL, released here meanwhile."""
    log = rec.native_log
    deadline = time.monotonic() + DESCRIBE_S
    while log is not None and log.undescribed() and time.monotonic() < deadline:
        time.sleep(0.001)
