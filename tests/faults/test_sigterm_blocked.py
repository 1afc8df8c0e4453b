"""SIGTERM ends a traced process blocked in C++ as it ends an untraced one: at once, by SIGTERM.

The Python handler commtrace installs cannot run while the main thread is inside a
C++ call; the signal thread dumps, closes the trace and re-raises with the default
action. A launcher tearing a job down (mp.spawn, Slurm) must not wait for the call.
"""
import os
import signal
import time

import pytest

import helpers as h

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "blocked_in_init.py")


def _listening(port: int) -> bool:
    """Whether a socket listens on ``port`` (the kernel's tables: connecting would be a peer)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            rows = [line.split() for line in f.read().splitlines()[1:]]
        if any(r[1].endswith(f":{port:04X}") and r[3] == "0A" for r in rows):   # 0A: LISTEN
            return True
    return False


def _terminate_when_ready(port):
    def after_start(proc):
        # inside init_process_group (C++): its store listens on the port, then waits for rank 1
        deadline = time.monotonic() + 60
        while not _listening(port) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
    return after_start


def test_sigterm_while_blocked_in_cpp(tmp_path):
    run_dir, ready, port = tmp_path / "run", str(tmp_path / "ready"), h.free_port()
    # The test's timeout (30 s) is shorter than the init timeout (60 s): a process
    # that waits for the C++ call to return fails the test.
    res = h.run(h.commtrace_cmd(run_dir, SCRIPT, port, ready), timeout=30,
                after_start=_terminate_when_ready(port))
    assert not res.timed_out, res.stderr
    assert res.returncode == -signal.SIGTERM, res.stderr
    (meta,) = [f for f in os.listdir(run_dir) if f.endswith(".meta.jsonl")]
    text = (run_dir / meta).read_text()
    assert '"type":"end","exit_code":143,"how":"signal"' in text
    assert any(f.startswith("sigterm.") for f in os.listdir(run_dir))


def test_program_handler_then_ours_back(tmp_path):
    """The program's own SIGTERM handler took the signal and put commtrace's back before the
    signal thread read the delivery: the thread must not take it as a stuck main thread."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "own_term_handler.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port()), timeout=120)
    assert res.returncode == 0, res.stderr
    assert "handled 20" in res.stdout
    assert not any(f.startswith("sigterm.") for f in os.listdir(run_dir))
    (meta,) = [f for f in os.listdir(run_dir) if f.endswith(".meta.jsonl")]
    assert '"how":"signal"' not in (run_dir / meta).read_text()


def _rank0(run_dir):
    from commtrace.trace.reader import load_run
    run = load_run(str(run_dir))
    (proc,) = [p for p in run.processes if p["rank"] == 0]
    return run, proc


def test_sigterm_while_the_trace_closes(tmp_path):
    """SIGTERM arriving while the exiting process writes its trace's end: the handler, run
    inside that close, must let it finish (before: a nested close returned at once and the
    process died with no end record, its ops unwritten), then end the process by SIGTERM; and
    end the trace as a SIGTERM anywhere else does: a dump, ``how: "signal"`` (before: neither)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "signal_while_closing.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port()), timeout=120)
    assert "ops done" in res.stdout, res.stderr
    assert res.returncode == -signal.SIGTERM, res.stderr
    run, proc = _rank0(run_dir)
    assert proc["complete"] and proc["end"]["type"] == "end", proc
    assert (proc["end"]["how"], proc["end"]["exit_code"]) == ("signal", 128 + signal.SIGTERM), proc["end"]
    assert [d["reason"] for d in proc["dumps"]] == ["SIGTERM"]
    assert list(run.frame["op"].astype(str)).count("all_reduce") == 3


def test_sigterm_after_the_end_record(tmp_path):
    """SIGTERM arriving once the end record is written (the files closing): the close finishes,
    the state dump is written, the process dies by SIGTERM, and its trace says so: the dump line
    and a second end record follow the exit's (before: the trace said "exit" of a process that
    SIGTERM ended, and did not list the dump)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "signal_while_closing.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port(), "TERM", "close"), timeout=120)
    assert "ops done" in res.stdout, res.stderr
    assert res.returncode == -signal.SIGTERM, res.stderr
    run, proc = _rank0(run_dir)
    assert proc["complete"], proc
    assert (proc["end"]["how"], proc["end"]["exit_code"]) == ("signal", 128 + signal.SIGTERM), proc["end"]
    assert [d["reason"] for d in proc["dumps"]] == ["SIGTERM"]
    assert any(f.startswith("sigterm.") for f in os.listdir(run_dir))
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 3
    p = h.commtrace_main("check", run_dir)
    assert "rank 0 terminated by SIGTERM (exit code 143)" in p.stdout, p.stdout


def test_keyboard_interrupt_while_the_trace_closes(tmp_path):
    """SIGINT (KeyboardInterrupt) arriving inside the close at exit: the close finishes, then the
    KeyboardInterrupt is raised (before: it left close at once, the trace without its end)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "signal_while_closing.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port(), "INT"), timeout=120)
    assert "ops done" in res.stdout, res.stderr
    assert "KeyboardInterrupt" in res.stderr, res.stderr   # atexit reports the re-raised one
    run, proc = _rank0(run_dir)
    assert proc["complete"] and proc["end"]["how"] == "exit", proc
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 3


def test_keyboard_interrupt_just_before_the_trace_closes(tmp_path):
    """SIGINT pending as the close at exit begins, before it holds SIGINT (sigview.deferred): the
    KeyboardInterrupt raised at its first line (atexit reports it) leaves the close to atexit's
    second call of it (before: the trace had neither its end nor anything since its last flush,
    here its definitions and all three ops)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "signal_before_close.py")
    res = h.run([h.PY, script, run_dir, h.free_port()], timeout=120)
    assert res.returncode == 0 and "ops done" in res.stdout, res.stderr   # as untraced: the script ended well
    assert "KeyboardInterrupt" in res.stderr, res.stderr
    run, proc = _rank0(run_dir)
    assert proc["complete"] and proc["end"]["how"] == "exit", proc
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 3


@pytest.mark.parametrize("where", ["apply", "dumps"])
def test_sigterm_while_the_main_thread_flushes(tmp_path, where):
    """SIGTERM arriving while the main thread is inside a flush: the handler must not close the
    trace there (before: a nested close, inside TraceWriter.write's lock ("dumps"), hung the
    process for good, a second SIGTERM too; just before it ("apply") the flush's lines, taken
    from the queue, were never written: an ended trace without its definitions or ops)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "signal_while_flushing.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port(), where), timeout=60)
    assert not res.timed_out, res.stderr
    assert "ops done" in res.stdout, res.stderr
    assert res.returncode == -signal.SIGTERM, res.stderr
    run, proc = _rank0(run_dir)
    assert proc["complete"] and proc["end"]["how"] == "signal", proc
    assert [d["reason"] for d in proc["dumps"]] == ["SIGTERM"]
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 3


def test_keyboard_interrupt_while_the_main_thread_flushes(tmp_path):
    """SIGINT arriving inside a flush on the main thread, the flush's lines taken from the queue:
    they are written, then the KeyboardInterrupt is raised (before: raised at once, the lines
    lost: the trace without its definitions and ops)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "signal_while_flushing.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port(), "apply", "INT"), timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "interrupted", res.stdout
    run, proc = _rank0(run_dir)
    assert proc["complete"] and proc["end"]["how"] == "exit", proc
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 3


def test_the_programs_sigterm_handler_exiting_inside_a_flush(tmp_path):
    """The program's own SIGTERM handler (``sys.exit(3)``) run inside a flush on the main thread,
    its lines taken from the queue: they are written, then the SystemExit is raised (before:
    raised at once, the lines lost: the trace without its definitions and ops)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "signal_while_flushing.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port(), "apply", "TERMEXIT"), timeout=60)
    assert res.returncode == 3, res.stderr
    run, proc = _rank0(run_dir)
    assert proc["complete"] and (proc["end"]["how"], proc["end"]["exit_code"]) == ("exit", 3), proc
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 3


@pytest.mark.parametrize("wakeup", ["before", "after"])
def test_sigusr1_while_flushing_with_the_programs_wakeup_fd(tmp_path, wakeup):
    """SIGUSR1 where the program owns the wakeup fd (asyncio), arriving inside TraceWriter.write's
    lock on the main thread: the dump waits for the flush (before: set before torch was imported,
    the handler dumped in place and deadlocked on that lock; set after, commtrace's replaced,
    the handler left the dump to the signal thread, which never saw the signal: no dump)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "signal_while_flushing.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port(), "dumps", "USR1", wakeup), timeout=60)
    assert not res.timed_out, res.stderr
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "dumped", res.stdout
    run, proc = _rank0(run_dir)
    assert [d["reason"] for d in proc["dumps"]] == ["SIGUSR1"]
    assert list(run.frame["op"].astype(str)) == ["all_reduce"] * 3


def test_a_terminated_forked_child_leaves_its_parent_running(tmp_path):
    """A forked child inherits the wakeup fd, our pipe: its SIGTERM's number went to the parent's
    signal thread, which took it for its own (before: the parent dumped and ended by SIGTERM
    0.2 s after Pool.terminate() or a DataLoader's shutdown ended a forked worker)."""
    run_dir = tmp_path / "run"
    script = os.path.join(os.path.dirname(SCRIPT), "forked_child_terminated.py")
    res = h.run(h.commtrace_cmd(run_dir, script, h.free_port()), timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-2:] == [f"child ended by signal {signal.SIGTERM}", "parent alive"], res.stdout
    from commtrace.trace.reader import load_run
    run = load_run(str(run_dir))
    (child,) = [p for p in run.processes if p["ppid"] in {q["pid"] for q in run.processes}]
    (parent,) = [p for p in run.processes if p is not child]
    assert parent["end"]["how"] == "exit" and parent["end"]["exit_code"] == 0, parent["end"]
    assert not any(f.startswith("sigterm.") and f".pid{parent['pid']}." in f for f in os.listdir(run_dir))
    assert child["end"]["how"] == "signal", child["end"]   # the child's own SIGTERM: its trace says so
