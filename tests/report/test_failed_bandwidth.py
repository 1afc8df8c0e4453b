"""A collective whose slowest rank's time is not known has no bandwidth: one that failed (it moved an
unknown part of its size in its time), one a rank's trace ends in (in flight), one a rank is missing
from. Before, a failed all_reduce (gloo rejects uint16 after the call) added its size and its time to
the per-op table's algbw/busbw like a completed one, and so did an all_reduce with the time of the
one rank that completed it (not the slowest: the other called it first). Both engines (one frame,
--partitioned)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import helpers as h
from report.conftest import cli

F32_BYTES = 4000


def _traced(tmp_path_factory, worker: str):
    """``worker`` traced on 2 gloo ranks; it exits 0."""
    run = h.spawn_traced(worker, 2, tmp_path_factory.mktemp(worker.removesuffix(".py")), timeout=120)
    run.result.check(0)
    return run


def _all_reduce_row(run, tmp_path, engine) -> dict:
    """The per-op table's all_reduce row of ``report --json``."""
    out = tmp_path / "r.json"
    assert cli("report", run.run_dir, "-q", "--json", out, *engine) == 0
    return next(r for r in json.loads(out.read_text())["by_op"] if r["op"] == "all_reduce")


def _bandwidth_by_hand(T: np.ndarray) -> float:
    """algbw = busbw of 2-rank all_reduces of F32_BYTES (factor 1): bytes over the summed slowest times ``T``."""
    return F32_BYTES * len(T) / (T.sum() * 1e-9)


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    return _traced(tmp_path_factory, "failed_collective.py")


@pytest.mark.parametrize("engine", [[], ["--partitioned"]])
def test_a_failed_collective_adds_nothing_to_bandwidth(failed_run, tmp_path, engine):
    assert all(failed_run.rank_json(r)["raised"] for r in range(2)), "gloo took uint16: no failed op to test"
    df = failed_run.frame
    ar = df[df["op"] == "all_reduce"]
    assert sorted(ar["status"].astype(str).value_counts().items()) == [("completed", 8), ("failed", 2)]
    ok = ar[ar["status"] == "completed"]
    assert set(ok["bytes"]) == {F32_BYTES}
    # by hand: per collective its slowest rank's duration T; S = the buffer; 2 ranks: factor 1
    expected = _bandwidth_by_hand(ok.groupby("seq")["duration_ns"].max().to_numpy(np.float64))
    row = _all_reduce_row(failed_run, tmp_path, engine)
    assert row["collectives"] == 5     # the failed one is still a collective, and its ops still count
    assert row["algbw"] == pytest.approx(expected, rel=1e-6)
    assert row["busbw"] == pytest.approx(expected, rel=1e-6)


@pytest.fixture(scope="module")
def in_flight_run(tmp_path_factory):
    return _traced(tmp_path_factory, "in_flight_at_end.py")


@pytest.mark.parametrize("engine", [[], ["--partitioned"]])
def test_a_collective_without_the_slowest_time_adds_nothing_to_bandwidth(in_flight_run, tmp_path, engine):
    df = in_flight_run.frame
    ar = df[df["op"] == "all_reduce"]
    by_seq = {s: sorted(zip(g["rank"].tolist(), g["status"].astype(str))) for s, g in ar.groupby("seq")}
    # seq 3: rank 1 called it first and its trace ended before it completed; seq 4: rank 1 untraced
    assert by_seq == {1: [(0, "completed"), (1, "completed")], 2: [(0, "completed"), (1, "completed")],
                      3: [(0, "completed"), (1, "in_flight")], 4: [(0, "completed")]}
    # by hand: the two all_reduces both ranks completed; 2 ranks: factor 1
    expected = _bandwidth_by_hand(ar[ar["seq"] <= 2].groupby("seq")["duration_ns"].max().to_numpy(np.float64))
    row = _all_reduce_row(in_flight_run, tmp_path, engine)
    assert row["collectives"] == 4 and row["untimed"] == 2    # and the report says how many it left out
    assert row["algbw"] == pytest.approx(expected, rel=1e-6)
    assert row["busbw"] == pytest.approx(expected, rel=1e-6)
    text = h.commtrace_main("report", in_flight_run.run_dir, "--width", "200", *engine).stdout
    per_op = " ".join(text[text.index("Per op"):].split("\n\n")[0].split())
    assert "busbw/algbw leave out 2 collective(s) without their slowest rank's time" in per_op
