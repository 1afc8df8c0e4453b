"""A blocking call is recorded blocking (``async`` False) on every torch, and its time is a wait.

Before torch 2.8 torch.distributed does not tell the group a call's async_op (most
Options types lack asyncOp; all_gather passes none), so commtrace labels each call
(capture/phases.py, ASYNC_OP_CALLS). One launch of workers/blocking_calls.py on 2
spawned gloo ranks; the expected flags are its calls counted by hand. In the smoke
selection (Makefile: SMOKE) that runs on the oldest and newest supported torch.
"""
from __future__ import annotations

import json

import pytest

import helpers as h
from commtrace import torch_compat
from commtrace.capture import phases
from helpers import Launch

W = 2
STEPS = 2  # workers/blocking_calls.py
OP = {"broadcast": "broadcast", "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
      "reduce": "reduce",
      "all_gather": "all_gather", "all_gather_into_tensor": "all_gather", "_all_gather_base": "all_gather",
      "all_gather_coalesced": "all_gather", "gather": "gather", "scatter": "scatter",
      "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
      "_reduce_scatter_base": "reduce_scatter", "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
      "barrier": "barrier"}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Launch:
    tmp = tmp_path_factory.mktemp("blocking")
    env = h.clean_env(BLOCKING_LEAVE_OUT=",".join(h.gloo_missing_ops()))
    launch = h.spawn_traced("blocking_calls.py", W, tmp, timeout=120, env=env)
    launch.result.check(0)
    return launch


def expected(ran: list[str]) -> list[tuple]:
    """(op, async) of one rank in call order."""
    E = []
    for name in ran:                                   # each function blocking, then async_op=True
        E += [(OP[name], False), (OP[name], True)]
    E += [("all_reduce", True), ("all_reduce", False), ("barrier", True)]   # async_op positional
    E += [("all_reduce", True), ("all_reduce", False)]  # an async call inside a blocking one
    E += [("all_reduce", False), ("all_reduce", True)]  # _coalescing_manager: async_ops False, True
    E += [("all_gather", False)] * 2                    # all_gather_object: sizes, payload
    E += [("all_reduce", False)] * STEPS                # the gradient averaged in each backward
    E += [("barrier", False)]
    return E


def test_each_call_records_its_async_op(run):
    df = run.frame
    for r in range(W):
        ran = run.rank_json(r)["ran"]
        assert set(OP) - set(ran) <= set(h.gloo_missing_ops()), ran
        d = df[df["rank"] == r].sort_values("t_start_ns")
        got = [(str(o), bool(a)) for o, a in zip(d["op"], d["async"])]
        exp = expected(ran)
        first = next((i for i, (a, b) in enumerate(zip(got, exp)) if a != b), min(len(got), len(exp)))
        assert got == exp, f"rank {r}, from #{first}: {got[first:first + 3]} vs {exp[first:first + 3]}"
    assert set(df["status"]) == {"completed"}


def test_labels_only_where_torch_does_not_pass_async_op(run):
    # torch >= 2.8: the Options say it; no call is wrapped (no cost per call)
    passes = torch_compat.c10d_passes_async_op(phases.ASYNC_OP_CALLS.values())
    assert run.rank_json(0)["labelled"] == ([] if passes else sorted(OP))


def test_a_blocking_all_reduce_is_waited_for(run, tmp_path):
    # Every op inside the steps is blocking: the rank waits for each from its call to its end,
    # so none of it is compute, and all the communication is exposed (rank 0 waits there for
    # rank 1, which sleeps in its backward pass first). Counted as async (torch < 2.8
    # before the labels), the time after the call returned read as compute.
    js = tmp_path / "report.json"
    h.commtrace_main("report", run.run_dir, "--json", js, "-q").check(0)
    per_rank = json.loads(js.read_text())["steps_per_rank"]
    assert sorted((s["rank"], s["step"]) for s in per_rank) == [(r, s) for r in range(W) for s in (1, 2)]
    for s in per_rank:
        assert s["comm_ns"] > 0, s
        assert s["exposed_ns"] == s["comm_ns"], s
