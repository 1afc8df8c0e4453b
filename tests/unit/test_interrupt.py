"""Ctrl-C stops a test run and its children, also a run started where SIGINT is ignored (the
background job of a non-interactive shell: ``make test &``, a script or tool running it)."""
import os
import signal
import subprocess
import sys
import time

from helpers import kill_session

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WAITS_ON_A_CHILD = '''
import os, subprocess, sys

def test_waits_on_a_child():
    subprocess.run([sys.executable, "-c",
                    "import os, time; open(os.environ['READY'], 'w').write(str(os.getpid())); time.sleep(600)"])
'''


def test_ctrl_c_stops_a_run_that_inherited_sigint_ignored(tmp_path):
    (tmp_path / "test_waits.py").write_text(WAITS_ON_A_CHILD)
    ready = tmp_path / "child.pid"
    env = {**os.environ, "READY": str(ready), "PYTHONPATH": TESTS}
    # tests/conftest.py as a plugin: the run's own conftest, over a test file of its own
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
                            "--rootdir", str(tmp_path), str(tmp_path / "test_waits.py")],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        while not (ready.exists() and ready.read_text()):
            assert run.poll() is None, run.stdout.read()
            time.sleep(0.1)
        child = int(ready.read_text())
        os.killpg(run.pid, signal.SIGINT)        # what a terminal's Ctrl-C sends its foreground group
        out, _ = run.communicate(timeout=60)
    finally:
        kill_session(run)
    assert run.returncode == 2 and "KeyboardInterrupt" in out, out     # pytest's "interrupted"
    assert not os.path.exists(f"/proc/{child}")
