"""Clock offsets measured on an existing world without touching it (what
``commtrace.start()`` will call): real untraced processes, a real gloo world."""
from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SHIFT_NS = 3_000_000_000  # worker_api.SHIFT_NS


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("clock-api") / "res")
    h.run([h.PY, os.path.join(HERE, "worker_api.py"), h.free_port(), out], timeout=90).check()
    res = {}
    for rank in (0, 1):
        with open(f"{out}.rank{rank}") as f:
            res[rank] = json.load(f)
    return res


def test_measured_twice_on_an_existing_world(api_run):
    for rank in (0, 1):
        r = api_run[rank]
        assert r["started"] is True and r["again"] == 1
        assert [line["when"] for line in r["lines"]] == ["start", "stop"]
        assert {line["method"] for line in r["lines"]} == {"gloo-pingpong"}
        assert {line["world_id"] for line in r["lines"]} == {"w"}
    assert all(line["offset_ns"] == 0 and line["rtt_ns"] == 0 for line in api_run[0]["lines"])
    for line in api_run[1]["lines"]:
        # One machine: the true offset of rank 1's shifted clock is exactly -shift.
        assert abs(line["offset_ns"] + SHIFT_NS) <= line["rtt_ns"] // 2 + 1, line
        assert line["rtt_ns"] > 0


def test_ranks_on_rank_0s_machine_measure_nothing(api_run):
    """Same kernel boot id: rank 1 shares rank 0's CLOCK_MONOTONIC; no group is
    built, rank 1 records that its offset is exactly 0, rank 0 records nothing."""
    assert api_run[0]["same_known"] is True and api_run[0]["same_lines"] == []
    assert api_run[1]["same_known"] is True
    [line] = api_run[1]["same_lines"]
    assert (line["method"], line["offset_ns"], line["rtt_ns"], line["world_id"]) == ("same-host", 0, 0, "w")


def test_users_world_untouched(api_run):
    """No group counter, name or sequence number of the user's changes, and the
    user's group keeps working (the next all_reduce is its next sequence number)."""
    for rank in (0, 1):
        r = api_run[rank]
        assert r["after"] == r["before"]
        assert r["before"]["group_count"] == 1 and r["before"]["pg_names"] == ["0"] and r["before"]["groups"] == 1
        assert r["sum"] == 2.0
        assert r["seq_after_op"] == r["before"]["seq"] + 1


def test_worlds_without_a_shared_store_are_skipped():
    """Ranks that share one process (HashStore, fake/threaded backends) share its
    clock, and the mpi backend has no store: nothing to measure, no rendezvous."""
    from torch.distributed import HashStore, PrefixStore

    from commtrace.capture import clock as clock_group

    sys.path.insert(0, HERE)
    from worker_api import Lines
    sink = Lines()
    assert clock_group.track_world(sink, PrefixStore("x/", HashStore()), 0, 2, "w", "gloo") is False
    assert clock_group.track_world(sink, None, 0, 2, "w", "gloo") is False
    for backend in ("fake", "threaded", "mpi"):
        assert clock_group.track_world(sink, object(), 0, 2, "w", backend) is False
    assert sink.lines == []
