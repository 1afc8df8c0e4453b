"""TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every group's backend in torch's ProcessGroupWrapper, which
checks each op's fingerprint across ranks on a helper gloo group before running it. Traced, each
op is recorded once (the wrapper's checks are not the program's ops and are not recorded), and
an op the ranks disagree on, which the wrapper fails on every rank, is in the trace as failed
and found by ``check``. (PyTorch's test_pg_wrapper.py and DistributedTest's gloo slice under
DETAIL: the same op counts as under INFO.)"""
from __future__ import annotations

import json

import helpers as h


def test_ops_of_groups_wrapped_by_debug_detail_are_recorded_once(tmp_path):
    env = h.clean_env(TORCH_DISTRIBUTED_DEBUG="DETAIL")
    run = h.spawn_traced("debug_detail.py", 2, tmp_path, timeout=120, env=env)
    run.result.check(0)
    for r in range(2):
        assert run.rank_json(r) == {"sum": [16.0] * 4, "wrapped": "_ProcessGroupWrapper", "mismatch": True}
    df = run.frame
    for r in range(2):
        ops = df[df["rank"] == r].sort_values("t_start_ns")
        got = [(str(g), str(o), str(s)) for g, o, s in zip(ops["group"], ops["op"], ops["status"])]
        last = ("1", "all_reduce", "failed") if r == 0 else ("1", "broadcast", "failed")
        assert got == [("0", "all_reduce", "completed")] * 3 + [
            ("1", "broadcast", "completed"), ("1", "all_reduce", "completed"), last,
            ("0", "barrier", "completed")], r
    chk = h.commtrace_main("check", run.run_dir, "--json")
    kinds = {(f["kind"], f["seq"]) for f in json.loads(chk.stdout)["findings"] if f["severity"] == "error"}
    assert kinds == {("mismatch", 3), ("failed", 3)}, chk.stdout[-3000:]
