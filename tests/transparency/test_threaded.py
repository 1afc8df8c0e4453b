"""torch's multi-threaded test backend ("threaded": the ranks of MultiThreadedTestCase, on which
many of PyTorch's own distributed tests run, are threads of one process) runs the same traced as
untraced. Its groups are left untraced: a trace's rank is a process, and the backend finds itself
in torch's registries by identity, so a wrapper registered in its place made its collectives fail.
(Found running test_functional_api.py's TestExpand and TestTraceableCollectives traced:
"KeyError: ThreadedPG world_size:4 rank:0" from DeviceMesh and from every collective.)"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "threaded_worker.py")


def test_threaded_backend_runs_the_same_traced_and_is_left_untraced(tmp_path):
    plain = h.run([h.PY, WORKER], env=h.clean_env(), timeout=120).check(0)
    traced = h.run(h.commtrace_cmd(tmp_path / "run", WORKER), env=h.clean_env(), timeout=120).check(0)
    assert json.loads(plain.stdout) == {"0": [3.0, 3.0], "1": [3.0, 3.0]}
    assert traced.stdout == plain.stdout
    assert len(h.load(tmp_path / "run")) == 0
    for engine in ((), ("--partitioned",)):     # the report says why it has nothing, not "no process group"
        report = h.commtrace_main("report", *engine, tmp_path / "run")
        assert report.returncode == 2, report
        assert "simulated backends (threaded), which commtrace leaves untraced" in report.stderr, report.stderr
