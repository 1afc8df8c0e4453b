"""torch < 2.13 registers a group inline in its helper (no _register_pg_in_world);
the hook then swaps its wrapper into torch's registries. CI runs torch 2.13, so
this drives that swap directly on a real gloo group (torch 2.11 ran it for real
on the GPU machine: see README, known limitations)."""
from __future__ import annotations

import json

import helpers as h
from helpers import worker


def test_adopted_group_replaces_the_real_one_everywhere_and_is_traced(tmp_path):
    out, run_dir = tmp_path / "res.json", tmp_path / "run"
    h.run([h.PY, worker("legacy_adopt.py"), h.free_port(), out, run_dir], timeout=60).check(0)
    res = json.loads(out.read_text())
    assert res == {"wrapped": True, "again_same": True, "in_pg_map": True, "name": True, "tags": True,
                   "by_name": True, "ranks": [0], "backend": "gloo", "value": [1.0, 1.0, 1.0], "destroyed": True}
    df = h.load(run_dir)
    assert [str(o) for o in df.sort_values("t_start_ns")["op"]] == ["all_reduce", "broadcast"]
    assert set(df["status"]) == {"completed"}
