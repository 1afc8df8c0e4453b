"""Programs as third parties write them, run traced and untraced: what commtrace must not change."""
from __future__ import annotations

import signal

import pytest

import helpers as h
from helpers import worker

_THREAD_THEN_RAISE = """\
import atexit, concurrent.futures, sys, threading, time
atexit.register(print, "atexit ran")
pool = concurrent.futures.ThreadPoolExecutor(1)  # never shut down: Python tells its idle worker to end
pool.submit(int).result()
def late():
    time.sleep(0.3)
    print("thread done", flush=True)
threading.Thread(target=late).start()
raise {exc}
"""


def test_keyboard_interrupt_waits_for_the_scripts_threads(tmp_path):
    """An uncaught KeyboardInterrupt: Python joins the script's non-daemon threads, then runs
    atexit, then ends by SIGINT; commtrace (which ends such a process itself) ran atexit at once
    and lost what the thread still had to do (and an executor's idle worker must not hang the exit)."""
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


@pytest.mark.parametrize("given,advice", [
    (["-X", "dev"], "python's own option -X dev is not taken here; give it to the python that runs commtrace "
                    "({py} -X dev -m commtrace run SCRIPT)"),
    (["-W", "error"], "python's own option -W error is not taken here; give it to the python that runs commtrace "
                      "({py} -W error -m commtrace run SCRIPT)"),
    (["-c", "pass"], "python -c CODE is not taken here: commtrace runs a script or -m MODULE (put the code in a file)"),
])
def test_python_option_with_a_value_is_named_whole(tmp_path, given, advice):
    """`commtrace run python -X dev x.py`: the advice was `python -X -m commtrace run`, which Python
    refuses (-X takes the next word); `python -c CODE` was told to give -c to the python running commtrace."""
    res = h.commtrace_main("run", "-o", tmp_path / "run", h.PY, *given, "x.py")
    assert (res.returncode, res.stderr.strip()) == (2, "commtrace: error: run: " + advice.format(py=h.PY))
    assert not (tmp_path / "run").exists()


_PREEMPTION_HANDLER = """\
import os, signal, sys
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
class Preempted(Exception):
    pass
def on_term(signum, frame):
    raise Preempted(f"signal {signum}")
signal.signal(signal.SIGTERM, on_term)
def train():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    except Preempted as e:
        raise RuntimeError("stopped early") from e
train()
"""


def test_signal_handlers_exception_traceback_as_untraced(tmp_path):
    """A program's SIGTERM handler (preemption) that raises, installed over commtrace's: it runs
    under commtrace's counting wrapper, whose frame showed in the script's traceback."""
    script = tmp_path / "preempt.py"
    script.write_text(_PREEMPTION_HANDLER)
    plain, res = h.concurrently(lambda: h.run([h.PY, script, h.free_port()]),
                                lambda: h.run(h.commtrace_cmd(tmp_path / "run", script, h.free_port())))
    assert plain.returncode == res.returncode == 1
    assert "in on_term" in plain.stderr and "The above exception was the direct cause" in plain.stderr
    assert [line for line in res.stderr.splitlines() if not line.startswith("commtrace:")] == \
        plain.stderr.splitlines(), res.stderr


def test_load_leaves_out_another_runs_files_as_the_report_does(tmp_path):
    """`commtrace run -o DIR` twice: the report analyses one run, the later one (as many files
    each: the earlier was kept when its file names sorted first), and warns about the other's
    files; commtrace.load returned both runs' ops (twice the counts), silently."""
    import warnings

    import commtrace
    from commtrace.analysis.run_info import load_report_run
    run_dir = tmp_path / "run"
    for n in (2, 3):
        h.run(h.commtrace_cmd(run_dir, worker("single.py"), h.free_port(), "ok", n)).check()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = commtrace.load(run_dir)
    report = load_report_run(run_dir)
    assert sorted(df["bytes"]) == sorted(report.frame["bytes"]) and len(df) == 3
    assert len(df.attrs["processes"]) == 1 and df["file"].nunique() == 1
    assert any("belongs to run" in str(w.message) for w in caught)
