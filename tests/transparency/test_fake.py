"""c10d's "fake" backend (one process playing one rank of a pretended world, or, under
LocalTensorMode, every rank) runs the same traced as untraced, and its groups are left untraced as
the threaded backend's are (test_threaded.py): LocalTensorMode looks up the group object it is
handed in torch's registries, where the wrapper stood instead. (Found running PyTorch's
tensor/parallel/test_tp_examples.py traced: every "WithLocalTensor" test failed, "SystemError:
<built-in method scatter ...> returned NULL without setting an exception".)"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_worker.py")


def test_fake_backend_runs_the_same_traced_and_is_left_untraced(tmp_path):
    args = ["--no-fsdp2"] if h.fsdp2_lacks_cpu() else []
    plain = h.run([h.PY, WORKER, *args], env=h.clean_env(), timeout=120).check(0)
    traced = h.run(h.commtrace_cmd(tmp_path / "run", WORKER, *args), env=h.clean_env(), timeout=120).check(0)
    computed = json.loads(plain.stdout)
    assert computed.pop("local_tensor", None) in (   # absent: this torch has no LocalTensorMode
        None, [[4.0, 4.0], [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]])
    assert computed == {"dry_run": [[1.0, 1.0], 8], "tp": [2, 4]}
    assert traced.stdout == plain.stdout
    assert len(h.load(tmp_path / "run")) == 0
    for engine in ((), ("--partitioned",)):     # the report says why it has nothing, not "no process group"
        report = h.commtrace_main("report", *engine, tmp_path / "run")
        assert report.returncode == 2, report
        assert "simulated backends (fake), which commtrace leaves untraced" in report.stderr, report.stderr
