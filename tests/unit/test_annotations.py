"""bucket/params derivation from DDP's layout, on a small synthetic frame."""
import numpy as np
import pandas as pd

from types import SimpleNamespace

from commtrace.trace.annotations import assign_buckets, bucket_rule, process_buckets


def _frame(rows):
    df = pd.DataFrame(rows, columns=["file", "op", "phase", "detail", "module", "iteration"])
    for c in ("file", "op", "phase", "detail", "module"):
        df[c] = df[c].astype("category")
    return df


def _assign(df, meta):
    """assign_buckets with the buckets the reader computes (process_buckets; one sig per row,
    rows in call order)."""
    cols = [c for c in ("op", "phase", "detail", "module", "dtype", "bucket") if c in df]
    sigs = {i: {c: None if pd.isna(v) else int(v) if isinstance(v, np.integer) else v
                for c, v in zip(cols, row)} for i, row in enumerate(df[cols].itertuples(index=False))}
    n = np.arange(len(df))
    rule = bucket_rule([SimpleNamespace(sigs=sigs, ddp=lines) for lines in meta.values()] or
                       [SimpleNamespace(sigs=sigs, ddp=[])])
    return assign_buckets(df, meta, process_buckets(n, n, df["iteration"].to_numpy(), sigs), rule)


META = {"f0": [
    {"type": "ddp_module", "module": "Net", "params": ["a.w", "a.b", "b.w"], "buffers": ["bn.mean"]},
    {"type": "ddp_buckets", "module": "Net", "from_iteration": 1, "buckets": [["b.w", "a.b", "a.w"]]},
    {"type": "ddp_buckets", "module": "Net", "from_iteration": 2, "buckets": [["b.w"], ["a.b", "a.w"]]},
]}


def test_buckets_count_per_iteration_and_follow_rebuild():
    df = _frame([
        ["f0", "broadcast", "forward", "buffers", "Net", 1],
        ["f0", "all_reduce", "backward", None, "Net", 1],
        ["f0", "broadcast", "forward", "bucket_rebuild", "Net", 2],
        ["f0", "all_reduce", "backward", None, "Net", 2],
        ["f0", "all_reduce", "backward", None, "Net", 2],
        ["f0", "all_reduce", None, None, None, 2],
    ])
    out = _assign(df, META)
    assert [None if pd.isna(b) else int(b) for b in out["bucket"]] == [None, 0, None, 0, 1, None]
    params = [None if pd.isna(p) else p for p in out["params"]]
    assert params == ["bn.mean", "b.w,a.b,a.w", None, "b.w", "a.b,a.w", None]


def test_no_phase_information_leaves_frame_alone():
    df = _frame([["f0", "all_reduce", None, None, None, 0]])
    out = _assign(df, {})
    assert "bucket" not in out.columns or out["bucket"].isna().all()


def test_integer_all_reduce_in_backward_is_no_bucket():
    """find_unused_parameters / static_graph: DDP all_reduces its int32 map of used
    parameters in backward (before or after the gradients); gradients are floats,
    so it is no bucket and the buckets keep their numbers."""
    df = _frame([
        ["f0", "all_reduce", "backward", None, "Net", 1],
        ["f0", "all_reduce", "backward", None, "Net", 1],
        ["f0", "all_reduce", "backward", None, "Net", 2],
        ["f0", "all_reduce", "backward", None, "Net", 2],
        ["f0", "all_reduce", "backward", None, "Net", 2],
    ])
    df["dtype"] = pd.Series(["int32", "float32", "float32", "float32", "int32"], dtype="category")
    out = _assign(df, META)
    assert [None if pd.isna(b) else int(b) for b in out["bucket"]] == [None, 0, 0, 1, None]
    sigs = {0: {"op": "all_reduce", "phase": "backward", "module": "Net", "dtype": "int32"},
            1: {"op": "all_reduce", "phase": "backward", "module": "Net", "dtype": "float32"}}
    got = process_buckets(np.arange(5), np.array([0, 1, 1, 1, 0]), np.array([1, 1, 2, 2, 2]), sigs)
    assert got.tolist() == [-1, 0, 0, 1, -1]


def test_comm_hook_ops_keep_the_bucket_their_sig_names():
    """A comm hook issuing several all_reduces per bucket (PowerSGD: uncompressed,
    P, Q) records GradBucket.index() in their sigs: all three are bucket 0, the
    next bucket's are 1; no counting."""
    sigs = {0: {"op": "all_reduce", "phase": "backward", "module": "Net", "dtype": "float32", "bucket": 0},
            1: {"op": "all_reduce", "phase": "backward", "module": "Net", "dtype": "float32", "bucket": 1},
            2: {"op": "all_reduce", "phase": "backward", "module": "Net", "dtype": "float32", "bucket": "x"}}
    got = process_buckets(np.arange(7), np.array([0, 0, 0, 1, 1, 1, 2]), np.ones(7, dtype=np.int64), sigs)
    assert got.tolist() == [0, 0, 0, 1, 1, 1, 0]   # a malformed bucket field: counted as before
    df = _frame([["f0", "all_reduce", "backward", None, "Net", 1]] * 4)
    df["bucket"] = pd.array([0, 0, 1, None], dtype="Int32")
    out = _assign(df, META)
    assert [int(b) for b in out["bucket"]] == [0, 0, 1, 0]


def test_rebuild_without_a_known_layout_leaves_params_unknown():
    """DDP rebuilt its buckets in forward 2 (empty ``buckets``): from there the
    first layout no longer names them; a later line for the same iteration does."""
    rows = [["f0", "all_reduce", "backward", None, "Net", 1],
            ["f0", "all_reduce", "backward", None, "Net", 2],
            ["f0", "all_reduce", "backward", None, "Net", 2]]
    first = [{"type": "ddp_buckets", "module": "Net", "from_iteration": 1, "buckets": [["b.w", "a.b", "a.w"]]},
             {"type": "ddp_buckets", "module": "Net", "from_iteration": 2, "buckets": []}]
    out = _assign(_frame(rows), {"f0": first})
    assert [None if pd.isna(p) else p for p in out["params"]] == ["b.w,a.b,a.w", None, None]
    later = first + [{"type": "ddp_buckets", "module": "Net", "from_iteration": 2, "buckets": [["b.w"], ["a.b", "a.w"]]}]
    out = _assign(_frame(rows), {"f0": later})
    assert list(out["params"]) == ["b.w,a.b,a.w", "b.w", "a.b,a.w"]
