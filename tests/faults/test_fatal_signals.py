"""A fatal signal (SIGABRT, SIGSEGV, ...) ends the trace before the process dies, and the
process dies as it would untraced (capture/fatal_signals.py, docs/faults.md): every op
recorded since the last flush is on disk, the end record says which signal, the exit status
is death by that signal, faulthandler still prints its traceback. Signals the program
handles itself, and forked children's, stay theirs.
"""
import os
import signal
import sys

import pytest

import helpers as h
from commtrace.capture.native_ext import FATAL_SIGNALS

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "fatal_after_ops.py")


@pytest.fixture(autouse=True)
def _built():
    h.ensure_native_wrapper(FATAL_SIGNALS, "the fatal-signal handler")


def _rank0(run_dir):
    from commtrace.trace.reader import load_run
    run = load_run(str(run_dir))
    (proc,) = [p for p in run.processes if p["rank"] == 0]
    return run, proc


@pytest.mark.parametrize("mode, signum, call", [("abort", signal.SIGABRT, "os.abort()"),
                                                ("segv", signal.SIGSEGV, "ctypes.string_at(0)")])
def test_fatal_signal_right_after_the_last_op(tmp_path, mode, signum, call):
    """Before: the five ops (less than the 0.5 s flush interval old) and the end were lost:
    `check` said "trace ends abruptly". And `check` says where the rank was: the process dumps
    every thread's stack before it dies (before, nothing told the call that crashed)."""
    run_dir = tmp_path / "run"
    res = h.run(h.commtrace_cmd(run_dir, SCRIPT, h.free_port(), mode), timeout=120)
    assert res.returncode == -signum, res.stderr
    run, proc = _rank0(run_dir)
    assert proc["complete"], proc
    assert (proc["end"]["how"], proc["end"]["exit_code"]) == ("signal", 128 + signum), proc["end"]
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 5
    assert list(run.frame["status"].astype(str)) == ["completed"] * 5
    p = h.commtrace_main("check", run_dir)
    name = signal.Signals(signum).name
    assert f"rank 0 terminated by {name} (exit code {128 + signum})" in p.stdout, p.stdout
    assert f"rank 0 was at fatal_after_ops.py:" in p.stdout and f" {call} ({name} dump)" in p.stdout, p.stdout
    assert os.path.exists(run_dir / f"{name.lower()}.rank0.pid{proc['pid']}.json")


def test_faulthandler_still_prints_its_traceback(tmp_path):
    run_dir = tmp_path / "run"
    cmd = h.commtrace_cmd(run_dir, SCRIPT, h.free_port(), "abort")
    res = h.run([sys.executable, "-X", "faulthandler", *cmd[1:]], timeout=120)
    assert res.returncode == -signal.SIGABRT, res.stderr
    assert "Fatal Python error: Aborted" in res.stderr, res.stderr
    assert 'fatal_after_ops.py", line' in res.stderr.split("Current thread", 1)[-1], res.stderr
    run, proc = _rank0(run_dir)
    assert proc["end"]["how"] == "signal" and len(run.frame) == 5, proc


def test_a_handler_installed_before_ours_runs_after_the_close(tmp_path):
    """Open MPI's SIGABRT handler (set at MPI_Init, before the first process group) still prints
    its stack trace and ends the process, once the trace is closed."""
    run_dir = tmp_path / "run"
    res = h.run(h.mpirun_cmd(1, *h.commtrace_cmd(run_dir, SCRIPT, h.free_port(), "mpi")), env=h.mpi_env(),
                timeout=120)
    assert res.returncode != 0, res.stderr
    assert "*** Process received signal ***" in res.stderr and "Signal: Aborted (6)" in res.stderr, res.stderr
    run, proc = _rank0(run_dir)
    assert (proc["end"]["how"], proc["end"]["exit_code"]) == ("signal", 128 + signal.SIGABRT), proc["end"]
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 5


def test_signals_the_program_handles_stay_its_own(tmp_path):
    """Its Python handlers (SIGABRT's from before tracing began, SIGBUS's from after) get the
    signals it sends itself, and it goes on traced: the trace was not closed by them."""
    run_dir = tmp_path / "run"
    res = h.run(h.commtrace_cmd(run_dir, SCRIPT, h.free_port(), "handled"), timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"handled {int(signal.SIGBUS)} {int(signal.SIGABRT)}" in res.stdout or \
        f"handled {int(signal.SIGABRT)} {int(signal.SIGBUS)}" in res.stdout, res.stdout
    run, proc = _rank0(run_dir)
    assert proc["end"]["how"] == "exit", proc["end"]
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 7


def test_a_forked_childs_fatal_signal_ends_its_own_trace(tmp_path):
    """The child's signal closes the child's trace (its own pipe and thread), never the
    parent's, which goes on and ends normally."""
    run_dir = tmp_path / "run"
    res = h.run(h.commtrace_cmd(run_dir, SCRIPT, h.free_port(), "fork"), timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"child killed by {int(signal.SIGABRT)}" in res.stdout, res.stdout
    from commtrace.trace.reader import load_run
    run = load_run(str(run_dir))
    ends = {p["pid"]: (p["end"] or {}).get("how") for p in run.processes}
    parent = next(p for p in run.processes if p["pid"] == int(res.stdout.split("parent ")[1].split()[0]))
    assert ends.pop(parent["pid"]) == "exit", ends
    assert list(ends.values()) == ["signal"], ends
    child = next(p for p in run.processes if p["pid"] in ends)
    assert child["end"]["exit_code"] == 128 + signal.SIGABRT, child["end"]
    assert list(run.frame[run.frame["pid"] == parent["pid"]]["op"].astype(str)) == ["all_reduce"] * 7
