"""A program reads its own Python backend's attributes through the group c10d hands
out (``_get_default_group()``, which is commtrace's wrapper when traced): the same
answers traced as untraced, and the backend's ops are still traced. (Found running
PyTorch's test_c10d_pypg.py traced: "'TracedProcessGroup' object has no attribute
'start_coalescing_count'".)"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pybackend_worker.py")


def _run(tmp_path, traced: bool) -> dict:
    tag = "traced" if traced else "plain"
    store, out = tmp_path / f"store.{tag}", tmp_path / f"out.{tag}.json"
    cmd = h.commtrace_cmd(tmp_path / "run", WORKER, store, out) if traced else [h.PY, WORKER, store, out]
    h.run(cmd, env=h.clean_env(), timeout=120).check(0)
    return json.loads(out.read_text())


def test_python_backend_attributes_read_through_the_traced_group(tmp_path):
    plain = _run(tmp_path, traced=False)
    assert plain == {"result": [4.0, 4.0], "allreduce_calls": 2, "tag": "X", "last_tag": "x",
                     "has_missing": False, "backend": "counting"}
    assert _run(tmp_path, traced=True) == plain
    df = h.load(tmp_path / "run")
    assert df["op"].astype(str).tolist() == ["all_reduce", "all_reduce"]
    assert h.group_wrappers(tmp_path / "run") == {"python"}
