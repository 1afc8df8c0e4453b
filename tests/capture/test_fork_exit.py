"""Only the process that began a traced run says where its trace went, not a child it forked."""
from __future__ import annotations

import os
import site

import pytest

import helpers as h
from helpers import worker

LINE = "commtrace: trace written to "


@pytest.mark.parametrize("how", ["commtrace run", "COMMTRACE=1"])
def test_a_forked_child_that_calls_sys_exit_prints_no_trace_line(tmp_path, how):
    """fork_world_first.py forks a child that makes a 1-rank world and calls sys.exit(3), then makes its own.
    The child returns through ``commtrace run``'s code (runner.run) and runs the atexit handlers it inherited
    (COMMTRACE=1: autostart's): before, it printed its own line too ("... (commtrace check DIR)": it is rank 0
    of its world and exited with 3), so a run whose program succeeded also said to check it."""
    ports = (h.free_port(), h.free_port())
    if how == "commtrace run":
        res = h.run(h.commtrace_cmd(tmp_path / "run", worker("fork_world_first.py"), *ports), timeout=120)
    else:
        if not any(os.path.exists(os.path.join(d, "commtrace-autostart.pth")) for d in site.getsitepackages()):
            pytest.fail("commtrace-autostart.pth is not installed in this environment (make setup installs it)")
        res = h.run([h.PY, worker("fork_world_first.py"), *ports], env=h.clean_env(COMMTRACE="1"), cwd=str(tmp_path),
                    timeout=120)
    res.check(0)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith(LINE)]
    assert len(lines) == 1 and "(commtrace report " in lines[0], res.stderr
