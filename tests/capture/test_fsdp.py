"""FSDP2 (fully_shard, DeviceMesh) under commtrace run: trains bitwise identically,
and its C++-issued all_gathers and reduce_scatters are recorded and matched."""
from __future__ import annotations

import pytest

import helpers as h
from helpers import worker

STEPS = 3
UNITS = 2  # sharded: a Linear layer and a block (the root holds no parameters of its own)


def _run(tmp, traced: bool):
    out = tmp / ("traced" if traced else "plain")
    args = [worker("fsdp2.py"), h.free_port(), out, STEPS]
    h.run(h.commtrace_cmd(tmp / "run", *args) if traced else [h.PY, *args], timeout=180).check(0)
    return out.read_text()


def test_fsdp2_traced_bitwise_identical_and_recorded(tmp_path):
    why = h.fsdp2_lacks_cpu()
    if why:
        pytest.skip(f"FSDP2 cannot train on CPU with this torch: {why}")
    assert _run(tmp_path, True) == _run(tmp_path, False)
    df = h.load(tmp_path / "run")
    assert set(df["status"]) == {"completed"} and sorted(df["rank"].unique()) == [0, 1]
    for r in range(2):
        d = df[df["rank"] == r]
        rs = d[d["op"] == "reduce_scatter"]
        assert len(rs) == UNITS * STEPS  # one gradient reduce-scatter per unit per step
        assert set(rs["phase"].astype(str)) == {"backward"}
        # Each unit's reduce_scatter is its own (docs/report.md: issued once the gradient reached
        # the unit's input). The block's Dropout(0.0) made no autograd node: it used to stay
        # "running" for the rest of the pass, and the block's reduce_scatters were "2.drop"'s.
        assert list(rs["module"].astype(str)) == ["2", "0"] * STEPS
        # Unit 2's pre-backward gathers it and prefetches unit 0 (a prefetch is its issuer's),
        # from a hook that runs before unit 2's backward begins.
        ag = d[(d["op"] == "all_gather") & (d["phase"] == "backward")]
        assert list(ag["module"].astype(str)) == ["2", "2"] * STEPS
        assert (d["op"] == "all_gather").sum() >= 2 * UNITS * STEPS  # forward, and again in backward
    # Every collective seen by both ranks, with the same size.
    for _, d in df.groupby(["group", "seq"], observed=True):
        assert sorted(d["rank"]) == [0, 1] and d["bytes"].nunique() == 1
