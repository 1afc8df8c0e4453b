"""Object collectives are labelled as such, both their size exchange and their
payload, by both wrappers (one real 2-rank gloo run: the default group on the
native wrapper where it is built, a second group on the Python wrapper)."""
from __future__ import annotations

import ast
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "objects_worker.py")

# (api, op, detail) in the order each group issues them (rank 0's view; p2p on rank 0 is send)
EXPECTED = [
    ("all_gather_object", "all_gather", "object_sizes"), ("all_gather_object", "all_gather", "object_payload"),
    ("broadcast_object_list", "broadcast", "object_sizes"), ("broadcast_object_list", "broadcast", "object_payload"),
    ("gather_object", "all_gather", "object_sizes"), ("gather_object", "gather", "object_payload"),
    ("scatter_object_list", "broadcast", "object_sizes"), ("scatter_object_list", "scatter", "object_payload"),
    ("scatter_object_list", "scatter", "object_sizes"),
    ("send_object_list", "send", "object_sizes"), ("send_object_list", "send", "object_payload"),
]


@pytest.fixture(scope="module")
def objects_run(tmp_path_factory):
    h.ensure_native_wrapper()
    tmp = tmp_path_factory.mktemp("objects")
    h.run(h.commtrace_cmd(tmp / "run", WORKER, tmp / "res", h.free_port()), timeout=120).check(0)
    return tmp


def test_results_unchanged(objects_run):
    for rank in (0, 1):
        res = ast.literal_eval((objects_run / f"res.rank{rank}").read_text())
        for tag in ("native", "python"):
            key = "default" if tag == "native" else "python"
            assert res[key]["all_gather"] == [{"rank": 0, "tag": tag}, {"rank": 1, "tag": tag}]
            assert res[key]["broadcast"] == [f"hello {tag}"]
            assert res[key]["scatter"] == ([["a"]] if rank == 0 else [["b", "b"]])


def test_size_exchange_and_payload_labelled_on_both_wrappers(objects_run):
    assert h.group_wrappers(objects_run / "run") == {"native", "python"}
    df = h.load(objects_run / "run")
    for group in ("0", "1"):
        ops = df[(df["rank"] == 0) & (df["group"].astype(str) == group) & df["api"].notna()]
        got = [(str(r.api), str(r.op), str(r.detail)) for r in ops.sort_values("t_start_ns").itertuples()]
        assert got == EXPECTED, (group, got)
        dtypes = {(str(r.detail), str(r.dtype)) for r in ops.itertuples()}
        assert dtypes == {("object_sizes", "int64"), ("object_payload", "uint8")}
    # rank 1 receives what rank 0 sends, labelled the same
    recv = df[(df["rank"] == 1) & (df["op"].astype(str) == "recv")]
    assert sorted(map(str, recv["detail"])) == ["object_payload", "object_payload", "object_sizes", "object_sizes"]
    assert set(map(str, recv["api"])) == {"recv_object_list"}


def test_plain_collectives_carry_no_api(objects_run):
    df = h.load(objects_run / "run")
    plain = df[df["api"].isna()]
    assert set(plain["op"].astype(str)) == {"all_reduce"} and plain["detail"].isna().all()
