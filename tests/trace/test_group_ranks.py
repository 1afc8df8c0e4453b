"""A group's global ranks: a JSON list in the trace, "0,1,2" text in commtrace.load()'s
group_ranks column, and one parser back (trace/group_ranks.py)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd

import commtrace
from commtrace.trace.group_ranks import parse_ranks, ranks_of, ranks_text

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tracebuilder import Proc, write_run  # noqa: E402


def test_text_of_a_group_lines_ranks():
    assert ranks_of([0, 2, 5]) == (0, 2, 5) and ranks_text([0, 2, 5]) == "0,2,5"
    assert ranks_text([7]) == "7" and ranks_text([]) == ""
    for hostile in ([0, "1"], [0, 1.0], [True], "0,1", 3, None, {"0": 1}):
        assert ranks_text(hostile) is None and ranks_of(hostile) is None, hostile


def test_one_parser_for_every_form():
    assert parse_ranks("0,1,2") == (0, 1, 2)
    assert parse_ranks(" 4, 1 ") == (4, 1)              # the given order; callers sort or make a set
    assert parse_ranks("[0, 2]") == (0, 2)              # as a list prints (older exports)
    assert parse_ranks("0,x,2") == (0, 2)               # an unparsable element is left out
    assert parse_ranks([3, 1]) == (3, 1) and parse_ranks(np.array([5, 6])) == (5, 6) and parse_ranks(9) == (9,)
    for empty in (None, float("nan"), pd.NA, "", "x", [True, "a"]):
        assert parse_ranks(empty) == (), empty
    for ranks in ([0], [0, 1, 2, 3], [12, 3, 7]):
        assert parse_ranks(ranks_text(ranks)) == tuple(ranks)


def test_the_column_reads_back_the_group_lines_ranks(tmp_path):
    procs = [Proc(r, world_size=3) for r in range(3)]
    for p in procs:
        p.op("all_reduce", 10, 20)
    df = commtrace.load(write_run(tmp_path / "run", procs))
    assert set(df["group_ranks"].astype(str)) == {"0,1,2"}
    assert {parse_ranks(v) for v in df["group_ranks"]} == {(0, 1, 2)}
