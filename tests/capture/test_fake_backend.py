"""c10d's "fake" backend traced: one process playing one rank of a pretended 4-rank world (dry runs,
PyTorch's test_fake_pg.py). The wrapped FakeProcessGroup still serves collectives, FSDP2 and
tensor parallelism; ops called through torch 2.13's deprecated all_gather_into_tensor and
reduce_scatter_tensor are placed at the program's line; ``check`` expects no other rank."""
from __future__ import annotations

import json
import os

import helpers as h
from helpers import worker


def test_fake_world_is_traced_alone_and_ops_placed_at_the_caller(tmp_path):
    out, run_dir = tmp_path / "res.json", tmp_path / "run"
    h.run(h.commtrace_cmd(run_dir, worker("fake_backend.py"), out), timeout=120).check(0)
    assert json.loads(out.read_text()) == {"gathered": 32}
    df = h.load(run_dir)
    assert set(df["backend"]) == {"fake"} and set(df["status"]) == {"completed"}
    assert {"all_reduce", "all_gather", "reduce_scatter", "broadcast"} <= set(df["op"].astype(str))
    # Regression: typing_extensions' deprecated() wrapper was taken for the caller of every
    # all_gather_into_tensor / reduce_scatter_tensor (torch 2.13 deprecates both).
    files = {str(c).rsplit(":", 2)[0] for c in df["callsite"]}
    assert files == {worker("fake_backend.py")} or files == {os.path.relpath(worker("fake_backend.py"))}, files
    # Regression: the pretended ranks 0, 2 and 3 were "no trace file" and "never arrived" errors.
    res = h.commtrace_main("check", run_dir)
    assert res.returncode == 0 and "no problems found" in res.stdout, res.stdout + res.stderr
