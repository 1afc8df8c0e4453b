"""Programs as third parties write them, run traced and untraced: what commtrace must not change."""
from __future__ import annotations

import signal

import helpers as h

_THREAD_THEN_RAISE = """\
import atexit, sys, threading, time
atexit.register(print, "atexit ran")
def late():
    time.sleep(0.3)
    print("thread done", flush=True)
threading.Thread(target=late).start()
raise {exc}
"""


def test_keyboard_interrupt_waits_for_the_scripts_threads(tmp_path):
    """An uncaught KeyboardInterrupt: Python joins the script's non-daemon threads, then runs
    atexit, then ends by SIGINT; commtrace (which ends such a process itself) ran atexit at once
    and lost what the thread still had to do."""
    script = tmp_path / "ki_thread.py"
    script.write_text(_THREAD_THEN_RAISE.format(exc="KeyboardInterrupt"))
    plain, res = h.concurrently(lambda: h.run([h.PY, script]),
                                lambda: h.run(h.commtrace_cmd(tmp_path / "run", script)))
    assert plain.returncode == res.returncode == -signal.SIGINT
    assert res.stdout == plain.stdout == "thread done\natexit ran\n"


def test_failed_mpi_rank_waits_for_the_scripts_threads(tmp_path):
    """A rank of an MPI job that raises ends without MPI_Finalize (commtrace's own exit): its
    non-daemon threads still run to their end first, as Python's shutdown would."""
    script = tmp_path / "raise_thread.py"
    script.write_text(_THREAD_THEN_RAISE.format(exc="ValueError('x')"))
    res = h.run(h.mpirun_cmd(1, h.PY, "-m", "commtrace", "run", "-o", tmp_path / "run", script), env=h.mpi_env())
    assert res.returncode != 0
    assert "thread done\natexit ran\n" in res.stdout, (res.stdout, res.stderr)
