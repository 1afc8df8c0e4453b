"""Every collective, traced on real gloo ranks: exact per-rank op sequence and bytes.

One launch of workers/all_ops.py per configuration (spawn 2 ranks, mpirun 2 and
3 ranks); expected values are derived here from the worker's tensor sizes.
"""
from __future__ import annotations

import inspect
import pickle

import pandas as pd
import pytest
import torch.distributed as dist

import helpers as h

F = 4  # float32


def _pickled(obj) -> int:
    # torch's _object_to_tensor pickles with pickle.Pickler (default protocol)
    return len(pickle.dumps(obj))


def _names_called(fn) -> tuple:
    """The global names a torch.distributed function's own code refers to (what it calls)."""
    return inspect.unwrap(fn).__code__.co_names


# torch < 2.13's ProcessGroup has none of the *_single methods: its functions call these instead,
# and the wrapper records the method called.
_OLDER = {"all_gather_single": "_allgather_base", "reduce_scatter_single": "_reduce_scatter_base",
          "all_to_all_single": "alltoall_base",
          "all_gather_single_coalesced": "allgather_into_tensor_coalesced",
          "reduce_scatter_single_coalesced": "reduce_scatter_tensor_coalesced"}


def variant(name: str) -> str:
    """The ProcessGroup method torch calls for ``name`` on this release (asked by capability)."""
    return name if hasattr(dist.ProcessGroup, name) or name not in _OLDER else _OLDER[name]


# Each op the worker leaves out where gloo lacks it (helpers.GLOO_OPTIONAL_OPS): the
# ProcessGroup methods (trace variants) its calls reach, which no other call reaches,
# and the names of the worker's checks of it.
_OPTIONAL = {"reduce_scatter": ({"reduce_scatter"}, {"reduce_scatter"}),
             "all_to_all": ({"alltoall"}, {"all_to_all"}),
             "all_to_all_single": ({variant("all_to_all_single"), "alltoall_base"},
                                   {"all_to_all_single", "alltoall_base", "fc_all_to_all"})}


def left_out_variants(left_out) -> set:
    return set().union(*(_OPTIONAL[op][0] for op in left_out))


def needs(all_ops, op: str) -> None:
    """Skip a test of ``op`` where this torch's gloo lacks it (the worker left it out)."""
    if op in all_ops.left_out:
        pytest.skip(f"gloo lacks {op} on this torch: {all_ops.left_out[op]}")


def recorded_async(op: str, variant: str, asy: bool) -> bool:
    """The async flag of a call with ``async_op=asy`` (monitored_barrier's: never): its own
    through a torch.distributed function, whatever the torch (``_coalescing_manager``'s
    coalesced op: its ``async_ops``, phases._ExitLabelled)."""
    return False if variant == "monitored_barrier" else asy


def expected_world_ops(W: int, r: int, left_out=()) -> list[tuple]:
    """(op, variant, bytes, root, reduce_op, async) of rank r on the default group, in call
    order, less the ops the worker ``left_out``."""
    E = []

    def add(op, variant, nbytes, root=None, red=None, asy=False):
        E.append((op, variant, nbytes, root, red, recorded_async(op, variant, asy)))
    add("all_reduce", "allreduce", 10 * F, red="SUM")
    add("all_reduce", "allreduce", 10 * F, red="MAX")
    add("all_reduce", "allreduce_coalesced", (2 + 3) * F, red="SUM")
    add("broadcast", "broadcast", 5 * F, root=1)
    add("reduce", "reduce", 6 * F, root=0, red="SUM")
    add("all_gather", "allgather", 3 * F)
    add("all_gather", variant("all_gather_single"), 3 * F)  # all_gather_into_tensor
    add("all_gather", variant("all_gather_single"), 3 * F)  # _all_gather_base
    add("all_gather", "allgather_coalesced", 2 * F)
    add("gather", "gather", 4 * F, root=0)
    add("scatter", "scatter", 4 * F * W if r == 0 else 0, root=0)  # only the root passes tensors in
    add("reduce_scatter", "reduce_scatter", 2 * F * W, red="SUM")
    add("reduce_scatter", variant("reduce_scatter_single"), 2 * F * W, red="SUM")  # reduce_scatter_tensor
    add("all_to_all", "alltoall", 2 * F * W)
    add("all_to_all", variant("all_to_all_single"), F * W * (W + 1) // 2)  # rank r sends j+1 floats to rank j
    add("barrier", "barrier", 0)
    add("barrier", "monitored_barrier", 0)
    add("all_reduce", "allreduce", 7 * F, red="SUM", asy=True)
    add("broadcast", "broadcast", 9 * F, root=0, asy=True)
    add("reduce_scatter", variant("reduce_scatter_single"), 2 * F * W, red="SUM", asy=True)
    add("all_reduce", "allreduce", 3 * F, red="PREMUL_SUM")  # fails on gloo
    add("all_gather", "allgather_into_tensor_coalesced", 3 * F, asy=True)  # direct calls: default opts
    add("reduce_scatter", "reduce_scatter_tensor_coalesced", 2 * F * W, red="SUM", asy=True)
    add("all_gather", "_allgather_base", 3 * F, asy=True)
    add("reduce_scatter", "_reduce_scatter_base", 2 * F * W, red="SUM", asy=True)
    add("all_to_all", "alltoall_base", 2 * F * W, asy=True)
    # all_gather_object: sizes (int64[1]), then the pickles padded to the largest (torch 2.15 sends
    # both through all_gather_single: the variant is the one torch's own code calls)
    obj = "all_gather_single" if "all_gather_single" in _names_called(dist.all_gather_object) else "allgather"
    add("all_gather", obj, 8)
    add("all_gather", obj, max(_pickled({"rank": i, "pad": "x" * i}) for i in range(W)))
    # broadcast_object_list of 2 objects: sizes (int64[2]), then all pickles concatenated
    objs = [{"from": 0, "v": [1, 2, 3]}, "second"]
    add("broadcast", "broadcast", 16, root=0)
    add("broadcast", "broadcast", sum(_pickled(o) for o in objs), root=0)
    # gather_object: all_gather of sizes, gather of padded pickles
    add("all_gather", "allgather", 8)
    add("gather", "gather", max(_pickled({"g": i}) for i in range(W)), root=0)
    # scatter_object_list: broadcast of the max size, scatter of padded pickles, scatter of sizes
    mx = max(_pickled({"s": i, "p": "y" * i}) for i in range(W))
    add("broadcast", "broadcast", 8, root=0)
    add("scatter", "scatter", mx * W if r == 0 else 0, root=0)
    add("scatter", "scatter", 8 * W if r == 0 else 0, root=0)
    # functional collectives (async by contract)
    add("all_reduce", "allreduce", 11 * F, red="SUM", asy=True)
    add("all_gather", variant("all_gather_single_coalesced"), 5 * F, asy=True)
    add("reduce_scatter", variant("reduce_scatter_single_coalesced"), 4 * W * F, red="SUM", asy=True)
    add("all_to_all", variant("all_to_all_single"), 3 * W * F, asy=True)
    add("broadcast", "broadcast", 6 * F, root=0, asy=True)
    # _coalescing_manager around two all_reduces -> one coalesced all_reduce
    add("all_reduce", "allreduce_coalesced", (12 + 13) * F, red="SUM")
    add("barrier", "barrier", 0)
    lacking = left_out_variants(left_out)
    return [e for e in E if e[1] not in lacking]


def _rows(df, rank, group):
    d = df[(df["rank"] == rank) & (df["group"] == group)].sort_values("t_start_ns")
    return d


def _tuples(d) -> list[tuple]:
    out = []
    for row in d.itertuples():
        root = None if pd.isna(row.root) else int(row.root)
        red = None if pd.isna(row.reduce_op) else str(row.reduce_op)
        out.append((str(row.op), str(row.variant), int(row.bytes), root, red, bool(row.async_ if hasattr(row, "async_") else getattr(row, "_38", False))))
    return out


def _as_list(d) -> list[tuple]:
    return [(str(o), str(v), int(b), None if pd.isna(rt) else int(rt), None if pd.isna(rd) else str(rd), bool(a))
            for o, v, b, rt, rd, a in zip(d["op"], d["variant"], d["bytes"], d["root"], d["reduce_op"], d["async"])]


def test_world_group_exact_sequence(all_ops):
    df, W = all_ops.frame, all_ops.world
    name = all_ops.rank_json(0)["world_name"]
    assert sorted(df["rank"].unique().tolist()) == list(range(W))
    for r in range(W):
        assert all_ops.rank_json(r)["left_out"] == sorted(all_ops.left_out)
        got = _as_list(_rows(df, r, name))
        exp = expected_world_ops(W, r, all_ops.left_out)
        assert got == exp, f"rank {r}: first difference at #{next((i for i, (a, b) in enumerate(zip(got, exp)) if a != b), min(len(got), len(exp)))}"


def test_groups_use_the_intended_wrapper(all_ops):
    # CPU-only gloo groups get the native wrapper when it is built; COMMTRACE_NATIVE=0 forces Python.
    assert h.group_wrappers(all_ops.run_dir) == {all_ops.wrapper}


def test_end_time_of_small_async_ops(all_ops):
    # The native wrapper stamps every async op's end from a future callback (no GIL);
    # the Python wrapper polls ops under 64 KiB and flags their end as observed.
    df = all_ops.frame
    d = df[df["async"] & df["variant"].isin(["allreduce", "broadcast"]) & (df["status"] == "completed")]
    assert len(d) >= 3 * all_ops.world
    assert (d["t_end_ns"] >= d["t_start_ns"]).all()
    assert set(d["end_observed"]) == ({False} if all_ops.wrapper == "native" else {True})


def test_out_bytes_of_uneven_all_to_all(all_ops):
    needs(all_ops, "all_to_all_single")
    df, W = all_ops.frame, all_ops.world
    name = all_ops.rank_json(0)["world_name"]
    for r in range(W):
        d = _rows(df, r, name)
        a2a = d[d["variant"] == variant("all_to_all_single")].iloc[0]
        assert int(a2a["out_bytes"]) == F * W * (r + 1)  # rank r receives r+1 floats from each rank


def test_out_bytes_of_gathers(all_ops):
    df, W = all_ops.frame, all_ops.world
    name = all_ops.rank_json(0)["world_name"]
    for r in range(W):
        d = _rows(df, r, name)
        ag = d[d["variant"] == "allgather"].iloc[0]
        assert int(ag["out_bytes"]) == 3 * F * W
        g = d[d["op"] == "gather"].iloc[0]
        assert int(g["out_bytes"]) == (4 * F * W if r == 0 else 0)


def test_results_correct_under_tracing(all_ops):
    for r in range(all_ops.world):
        res = all_ops.rank_json(r)
        assert res["backend"] == "gloo"  # dist.get_backend() under tracing
        bad = [k for k, ok in res["checks"].items() if not ok]
        assert not bad, f"rank {r}: wrong results for {bad}"
        # 32 checks: 2 of them the subgroup {0, W-1}'s (its members only), 5 the optional ops'
        left_out = set().union(*(_OPTIONAL[op][1] for op in all_ops.left_out))
        assert not left_out & set(res["checks"])
        assert len(res["checks"]) == 32 - (0 if r in (0, all_ops.world - 1) else 2) - len(left_out)


def test_unsupported_op_fails_and_error_reaches_caller_unchanged(all_ops):
    df, W = all_ops.frame, all_ops.world
    for r in range(W):
        errs = all_ops.rank_json(r)["errors"]
        assert errs["premul"][0] == "RuntimeError"
        assert "PREMUL_SUM" in errs["premul"][1]
        assert errs["premul"] == errs["premul_inner"], "traced call changed the error"
        row = df[(df["rank"] == r) & (df["reduce_op"] == "PREMUL_SUM")]
        assert len(row) == 1
        assert row["status"].iloc[0] == "failed"
        assert errs["premul"][1].splitlines()[0] in str(row["error"].iloc[0])


# gloo's tensor reduce-scatter Works (one tensor or coalesced) are polled for completion
# when the caller does not block (async_op=True, functional collectives, direct calls).
_RS_ASYNC = ("reduce_scatter_single", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced",
             "reduce_scatter_single_coalesced")


def _rs_polled(df):
    return df["variant"].isin(_RS_ASYNC) & ((df["variant"] != variant("reduce_scatter_single")) | df["async"])


def test_every_op_completed(all_ops):
    df = all_ops.frame
    ok = df[(df["reduce_op"] != "PREMUL_SUM") & ~_rs_polled(df)]
    bad = ok[ok["status"] != "completed"]
    assert bad.empty, bad[["rank", "seq", "op", "variant", "status"]].to_string()
    assert not all_ops.frame.attrs["incomplete"]
    for p in df.attrs["processes"]:
        assert p["end"] is not None and p["complete"], p["file"]


def test_async_reduce_scatter_completed(all_ops):
    df = all_ops.frame
    d = df[_rs_polled(df)]
    assert len(d) == 4 * all_ops.world
    assert set(d["status"]) == {"completed"}


def test_sequence_numbers_agree_across_members(all_ops):
    df = all_ops.frame
    coll = df[~df["op"].isin(["send", "recv"])]
    for (group, seq), d in coll.groupby(["group", "seq"], observed=True):
        members = [int(x) for x in str(d["group_ranks"].iloc[0]).split(",")]
        assert sorted(d["rank"].tolist()) == members, (group, seq)
        assert d["op"].nunique() == 1 and d["variant"].nunique() == 1, (group, seq)
        assert d["shapes"].nunique() == 1 or d["op"].iloc[0] in ("scatter", "gather", "all_to_all"), (group, seq)
    for (group, rank), d in coll.groupby(["group", "rank"], observed=True):
        seqs = d.sort_values("t_start_ns")["seq"].tolist()
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), (group, rank)


def test_subgroups_recorded_with_name_and_global_ranks(all_ops):
    df, W = all_ops.frame, all_ops.world
    members = [0, W - 1]
    ar, bc = recorded_async("all_reduce", "allreduce", False), recorded_async("broadcast", "broadcast", False)
    for r in range(W):
        res = all_ops.rank_json(r)
        if r in members:
            d = _rows(df, r, res["sub"]["name"])
            assert res["sub"]["ranks"] == members
            assert _as_list(d) == [("all_reduce", "allreduce", 8 * F, None, "SUM", ar),
                                   ("broadcast", "broadcast", 3 * F, W - 1, None, bc)]
            assert set(d["group_ranks"]) == {"0,%d" % (W - 1)}
            assert set(d["group_size"]) == {2}
            assert d["seq"].tolist() == [1, 2]
        else:
            assert "sub" not in res
        cur = res["cur"]
        exp_ranks = [0, 1] if r < 2 else [2]
        assert cur["ranks"] == exp_ranks
        d = _rows(df, r, cur["name"])
        assert _as_list(d) == [("all_reduce", "allreduce", 16 * F, None, "SUM", ar)]
        assert set(d["group_ranks"]) == {",".join(map(str, exp_ranks))}
        solo = res["solo"]
        assert solo["ranks"] == [r]
        d = _rows(df, r, solo["name"])
        assert _as_list(d) == [("all_reduce", "allreduce", F, None, "SUM", ar)]
        assert set(d["group_ranks"]) == {str(r)} and set(d["group_size"]) == {1}
    # Non-members of the new_group never record its ops.
    sub_name = all_ops.rank_json(0)["sub"]["name"]
    assert set(df[df["group"] == sub_name]["rank"]) == set(members)


def test_every_traced_method_reaches_the_wrapper(all_ops):
    """Dynamic counterpart of test_api: each non-p2p method in ops.SPECS was called by the
    worker (through torch.distributed, DDP-free C++ callers or the group object) and recorded."""
    from commtrace.capture import ops
    seen = set(all_ops.frame["variant"].astype(str))
    # gloo does not implement the single-tensor gather of torch 2.15 (gather_single and its alias
    # gather_into_tensor): nothing reaches them here; test_api checks statically that they are traced.
    # A *_single method this torch's ProcessGroup lacks is never called (``variant``).
    expected = {name for name, spec in ops.SPECS.items() if not spec.p2p} - {"gather_single", "gather_into_tensor"}
    expected = {name for name in expected if variant(name) == name} - left_out_variants(all_ops.left_out)
    assert expected - seen == set()
