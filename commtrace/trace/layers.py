"""Merge the C++ layer (the ProcessGroupMPI patch) into the Python wrapper's ops.

The patch sees an op at five points (patches/README.md, "What is measured"): queued
(``t_enqueue_ns``: a C++ record's ``t_call``), taken off the queue (``t_dequeue_ns``:
``d_return``), first MPI call begun and last one returned (``t_mpi_begin_ns`` /
``t_mpi_end_ns``, from ``.mpi.bin``; NaN without it), run function returned
(``t_run_end_ns``: ``d_end``); tests may give them in these columns instead. Each C++ row is
folded into the Python row of the same op and dropped: the op's time is split into
``queue_wait_ns`` (behind earlier ops), ``pre_mpi_ns`` (ProcessGroupMPI's global MPI lock plus
input copies), ``mpi_ns`` (inside MPI), ``post_mpi_ns`` (output copies) and ``run_ns`` (their sum).

Matching: only rows of one ``pid`` whose groups have the same global ranks; several
such groups pair in order of their first op. Within a pair, collectives are aligned
by ``seq`` order with ``difflib`` (an op only one layer saw, e.g. one that failed its
argument checks, does not shift the rest); p2p ops (counted per peer by Python; of them
the patch records only recvs from any source, which are not queued) pair in
``t_start_ns`` order within (op, from any source or not). Unmatched
C++ rows stay (``source == "cpp"``) with the new columns from their own times; other
rows get NaN. The input frame is not modified.
"""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import numpy as np

from .group_ranks import parse_ranks
from .schema import P2P_OPS, RECV_ANY_SOURCE

if TYPE_CHECKING:  # pandas is imported lazily by the reader
    import pandas

CPP_TIME_COLUMNS = (
    ("t_enqueue_ns", "t_start_ns"),
    ("t_dequeue_ns", "t_return_ns"),
    ("t_run_end_ns", "t_end_ns"),
)
MPI_CALL_KEYS = ["file", "group", "seq"]
NEW_COLUMNS = ("t_enqueue_ns", "t_dequeue_ns", "t_mpi_begin_ns", "t_mpi_end_ns", "t_run_end_ns",
               "queue_wait_ns", "pre_mpi_ns", "mpi_ns", "post_mpi_ns", "run_ns")


def _cpp_times(frame: "pandas.DataFrame", idx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(enqueue, dequeue, mpi_end) of the rows ``idx`` as float arrays (NaN = unknown)."""
    out = []
    for own, generic in CPP_TIME_COLUMNS:
        vals = frame.loc[idx, generic].to_numpy(dtype=float, na_value=np.nan)
        if own in frame.columns:
            o = frame.loc[idx, own].to_numpy(dtype=float, na_value=np.nan)
            vals = np.where(np.isnan(o), vals, o)
        out.append(vals)
    return tuple(out)


def _mpi_call_offsets(frame, idx, mpi_calls) -> tuple[np.ndarray, np.ndarray]:
    """(MPI begin, MPI end) offsets from the enqueue time of the C++ rows ``idx`` (NaN = none)."""
    if mpi_calls is None or len(mpi_calls) == 0:
        return np.full(len(idx), np.nan), np.full(len(idx), np.nan)
    import pandas as pd
    keys = pd.MultiIndex.from_arrays([frame.loc[idx, "file"].astype(str).to_numpy(),
                                      frame.loc[idx, "group"].astype(str).to_numpy(),
                                      frame.loc[idx, "seq"].to_numpy(dtype=np.int64)])
    calls = (mpi_calls.astype({"file": str, "group": str, "seq": np.int64})
             .drop_duplicates(MPI_CALL_KEYS, keep="last").set_index(MPI_CALL_KEYS))
    got = calls.reindex(keys)
    return got["d_mpi_begin"].to_numpy(dtype=float), got["d_mpi_end"].to_numpy(dtype=float)


def _first_time(frame, idx) -> float:
    v = frame.loc[idx, "t_start_ns"].to_numpy(dtype=float, na_value=np.nan)
    return float(np.nanmin(v)) if np.isfinite(v).any() else 0.0


def _with_anysource(p2p):
    return p2p.assign(_anysource=(p2p["variant"].astype(str) == RECV_ANY_SOURCE).to_numpy())


def _match_group(frame, py_idx, cpp_idx, pairs_out: list) -> None:
    py = frame.loc[py_idx]
    cp = frame.loc[cpp_idx]
    py_coll = py[~py["op"].isin(P2P_OPS)].sort_values(["seq", "t_start_ns"], kind="stable")
    cp_coll = cp[~cp["op"].isin(P2P_OPS)].sort_values("seq", kind="stable")
    # equal ops in order, tolerant of gaps
    match = difflib.SequenceMatcher(None, list(py_coll["op"]), list(cp_coll["op"]), autojunk=False)
    blocks = match.get_matching_blocks()
    pairs_out.extend((py_coll.index[b.a + k], cp_coll.index[b.b + k]) for b in blocks for k in range(b.size))
    # p2p: in call order within (op, from any source, peer): a recv from any source is never a recv from a peer
    py_p2p = _with_anysource(py[py["op"].isin(P2P_OPS)])
    cp_p2p = _with_anysource(cp[cp["op"].isin(P2P_OPS)])
    if len(py_p2p) == 0 or len(cp_p2p) == 0:
        return
    keys = ["op", "_anysource", "peer"] if "peer" in frame.columns else ["op", "_anysource"]
    cp_groups = {k if isinstance(k, tuple) else (k,): g
                 for k, g in cp_p2p.groupby(keys, dropna=False, sort=False, observed=True)}
    for k, g in py_p2p.groupby(keys, dropna=False, sort=False, observed=True):
        k = k if isinstance(k, tuple) else (k,)
        other = cp_groups.get(k)
        if other is None:
            continue
        pairs_out.extend(zip(g.sort_values("t_start_ns", kind="stable").index,
                             other.sort_values("t_start_ns", kind="stable").index))


def merge_cpp_layer(frame: "pandas.DataFrame", mpi_calls: "pandas.DataFrame | None" = None) -> "pandas.DataFrame":
    """Fold C++-layer rows into the Python rows of the same ops (module doc). ``mpi_calls``: file,
    group, seq, d_mpi_begin, d_mpi_end (ns from the enqueue time) of each C++ op that made MPI calls."""
    out = frame.copy()
    if not out.index.is_unique:
        out = out.reset_index(drop=True)
    for col in NEW_COLUMNS:
        out[col] = out[col].astype(float) if col in out.columns else np.nan
    if len(out) == 0 or "source" not in out.columns:
        return out
    is_cpp = (out["source"] == "cpp").to_numpy()
    if not is_cpp.any():
        return out

    # Times of every C++ row, from whichever columns carry them.
    cpp_idx = out.index[is_cpp]
    enq, deq, rend = _cpp_times(out, cpp_idx)
    d_begin, d_end = _mpi_call_offsets(out, cpp_idx, mpi_calls)
    mbeg, mend = enq + d_begin, enq + d_end
    for col, v in zip(NEW_COLUMNS, (enq, deq, mbeg, mend, rend,
                                    deq - enq, mbeg - deq, mend - mbeg, rend - mend, rend - deq)):
        out.loc[cpp_idx, col] = v

    ranks = [tuple(sorted(parse_ranks(v))) for v in out["group_ranks"].astype(object)]
    keyed = out.assign(_ranks=ranks, _cpp=is_cpp)

    pairs: list = []
    for _, sub in keyed.groupby(["pid", "_ranks"], sort=False, observed=True):
        if not sub["_cpp"].any() or sub["_cpp"].all():
            continue
        py_groups, cp_groups = ([g.index for _, g in part.groupby("group", sort=False, dropna=False,
                                                                  observed=True)]
                                for part in (sub[~sub["_cpp"]], sub[sub["_cpp"]]))
        py_groups.sort(key=lambda ix: _first_time(out, ix))
        cp_groups.sort(key=lambda ix: _first_time(out, ix))
        for pi, ci in zip(py_groups, cp_groups):
            _match_group(keyed, pi, ci, pairs)

    if pairs:
        py_rows, cp_rows = (list(x) for x in zip(*pairs))
        for col in NEW_COLUMNS:
            out.loc[py_rows, col] = out.loc[cp_rows, col].to_numpy()
        out = out.drop(index=cp_rows)
    return out

