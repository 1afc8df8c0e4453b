"""Merge the C++ layer (the ProcessGroupMPI patch) into the Python wrapper's ops.

Both layers can see the same op: the Python wrapper when the collective is
called and when its Work completes, the patched ProcessGroupMPI at five points
(patches/README.md): when the op was queued (``t_enqueue_ns``), when its worker
thread took it off the queue (``t_dequeue_ns``), when its first MPI call began
and its last one returned (``t_mpi_begin_ns``, ``t_mpi_end_ns``; from the
``.mpi.bin`` file, NaN for traces without one) and when its run function
returned (``t_run_end_ns``). This module's one function, :func:`merge_cpp_layer`,
folds each C++ row into the Python row of the same op and drops it, so an op
appears once, with its time split into (patches/README.md, "What is measured"):

* ``queue_wait_ns`` = dequeue - enqueue: waiting in ProcessGroupMPI's queue
  behind earlier ops;
* ``pre_mpi_ns`` = MPI begin - dequeue: waiting for ProcessGroupMPI's global
  MPI lock (held e.g. by a blocking recv's wait on the caller's thread) plus
  the input copies (flatten) the op makes before its MPI call;
* ``mpi_ns`` = MPI end - MPI begin: inside the MPI call(s) only;
* ``post_mpi_ns`` = run end - MPI end: the output copies after the MPI call;
* ``run_ns`` = run end - dequeue = pre + mpi + post: everything the worker
  thread did for the op (what older versions of this module called ``mpi_ns``).

Matching rules
--------------
* Only rows of the same process (``pid``) are matched; a C++ row is matched to
  a Python row whose group has the same global ranks (``group_ranks``, compared
  as sorted tuples).
* Several groups with the same ranks (``new_group([0, 1])`` twice) are paired
  in order of their first op (Python groups with Python groups ordered by their
  first ``t_start_ns``, C++ groups likewise); the k-th Python group takes the
  k-th C++ group.
* Within a pair of groups, collectives are matched in order of ``seq`` (C++
  counts per ProcessGroupMPI instance, Python per group): the two op-name
  sequences are aligned (``difflib``), so an op only one layer saw (e.g. one
  that failed argument checks before it was queued, or an op the Python
  wrapper implements with several backend calls) does not shift the rest.
* Point-to-point ops (``send``/``recv``: the Python wrapper counts them per
  peer) are matched in order of ``t_start_ns`` within (op, peer) when a
  ``peer`` column exists, else within op. (The shipped patch does not record
  p2p ops, which ProcessGroupMPI does not queue, so this only matters for
  future C++ layers.)

Output: matched Python rows gain the columns ``NEW_COLUMNS``; the C++ row is
dropped. Unmatched C++ rows stay, with ``source == "cpp"`` and the same columns
filled from their own times. The other rows get NaN in the new columns. The
input frame is not modified.

C++ rows carry their times either in ``t_enqueue_ns``/``t_dequeue_ns``/
``t_run_end_ns`` (when the reader fills those) or in the generic
``t_start_ns``/``t_return_ns``/``t_end_ns`` (a C++ record's ``t_call`` is the
enqueue time, ``d_return`` the dequeue and ``d_end`` the run end). The MPI call
times come from ``mpi_calls`` (the reader's ``read_mpi_calls``): offsets from
the enqueue time keyed by (``file``, ``group``, ``seq``).
"""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import numpy as np

from .group_ranks import parse_ranks
from .schema import P2P_OPS

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
        vals = np.full(len(idx), np.nan)
        if generic in frame.columns:
            vals = frame.loc[idx, generic].to_numpy(dtype=float, na_value=np.nan).copy()
        if own in frame.columns:
            o = frame.loc[idx, own].to_numpy(dtype=float, na_value=np.nan)
            vals = np.where(np.isnan(o), vals, o)
        out.append(vals)
    return out[0], out[1], out[2]


def _mpi_call_offsets(frame, idx, mpi_calls) -> tuple[np.ndarray, np.ndarray]:
    """(MPI begin, MPI end) offsets from the enqueue time of the C++ rows ``idx`` (NaN = none)."""
    nan = np.full(len(idx), np.nan)
    if mpi_calls is None or len(mpi_calls) == 0 or not set(MPI_CALL_KEYS) <= set(frame.columns):
        return nan, nan.copy()
    import pandas as pd
    keys = pd.MultiIndex.from_arrays([frame.loc[idx, "file"].astype(str).to_numpy(),
                                      frame.loc[idx, "group"].astype(str).to_numpy(),
                                      frame.loc[idx, "seq"].to_numpy(dtype=np.int64)])
    calls = (mpi_calls.astype({"file": str, "group": str, "seq": np.int64})
             .drop_duplicates(MPI_CALL_KEYS, keep="last").set_index(MPI_CALL_KEYS))
    got = calls.reindex(keys)
    return got["d_mpi_begin"].to_numpy(dtype=float), got["d_mpi_end"].to_numpy(dtype=float)


def _align(py_ops: list, cpp_ops: list) -> list[tuple[int, int]]:
    """Index pairs (i_py, i_cpp) of equal ops, in order, tolerant of gaps."""
    sm = difflib.SequenceMatcher(None, py_ops, cpp_ops, autojunk=False)
    pairs = []
    for block in sm.get_matching_blocks():
        pairs.extend((block.a + k, block.b + k) for k in range(block.size))
    return pairs


def _first_time(frame, idx) -> float:
    if "t_start_ns" not in frame.columns or len(idx) == 0:
        return 0.0
    v = frame.loc[idx, "t_start_ns"].to_numpy(dtype=float, na_value=np.nan)
    return float(np.nanmin(v)) if np.isfinite(v).any() else 0.0


def _match_group(frame, py_idx, cpp_idx, pairs_out: list) -> None:
    """Match the rows of one (python group, cpp group) pair."""
    py = frame.loc[py_idx]
    cp = frame.loc[cpp_idx]
    py_coll = py[~py["op"].isin(P2P_OPS)].sort_values(["seq", "t_start_ns"] if "t_start_ns" in py else ["seq"], kind="stable")
    cp_coll = cp[~cp["op"].isin(P2P_OPS)].sort_values("seq", kind="stable")
    for i, j in _align(list(py_coll["op"]), list(cp_coll["op"])):
        pairs_out.append((py_coll.index[i], cp_coll.index[j]))
    # p2p: in call order within (op, peer)
    py_p2p = py[py["op"].isin(P2P_OPS)]
    cp_p2p = cp[cp["op"].isin(P2P_OPS)]
    if len(py_p2p) == 0 or len(cp_p2p) == 0:
        return
    keys = ["op", "peer"] if "peer" in frame.columns else ["op"]
    order = "t_start_ns" if "t_start_ns" in frame.columns else "seq"
    cp_groups = {k if isinstance(k, tuple) else (k,): g
                 for k, g in cp_p2p.groupby(keys, dropna=False, sort=False, observed=True)}
    for k, g in py_p2p.groupby(keys, dropna=False, sort=False, observed=True):
        k = k if isinstance(k, tuple) else (k,)
        other = cp_groups.get(k)
        if other is None:
            continue
        a = g.sort_values(order, kind="stable").index
        b = other.sort_values(order, kind="stable").index
        pairs_out.extend(zip(a, b))


def merge_cpp_layer(frame: "pandas.DataFrame", mpi_calls: "pandas.DataFrame | None" = None) -> "pandas.DataFrame":
    """Fold C++-layer rows into the Python rows of the same ops (see module doc).

    ``mpi_calls``: columns file, group, seq, d_mpi_begin, d_mpi_end (ns from the
    enqueue time), one row per C++ op that made MPI calls."""
    out = frame.copy()
    if not out.index.is_unique:
        out = out.reset_index(drop=True)
    for col in NEW_COLUMNS:
        if col not in out.columns:
            out[col] = np.nan
        else:
            out[col] = out[col].astype(float)
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
    out.loc[cpp_idx, "t_enqueue_ns"] = enq
    out.loc[cpp_idx, "t_dequeue_ns"] = deq
    out.loc[cpp_idx, "t_mpi_begin_ns"] = mbeg
    out.loc[cpp_idx, "t_mpi_end_ns"] = mend
    out.loc[cpp_idx, "t_run_end_ns"] = rend
    out.loc[cpp_idx, "queue_wait_ns"] = deq - enq
    out.loc[cpp_idx, "pre_mpi_ns"] = mbeg - deq
    out.loc[cpp_idx, "mpi_ns"] = mend - mbeg
    out.loc[cpp_idx, "post_mpi_ns"] = rend - mend
    out.loc[cpp_idx, "run_ns"] = rend - deq

    if "group_ranks" in out.columns:
        ranks = [tuple(sorted(parse_ranks(v))) for v in out["group_ranks"].astype(object)]
    else:
        ranks = [()] * len(out)
    pid = out["pid"] if "pid" in out.columns else 0
    keyed = out.assign(_pid=pid, _ranks=ranks, _cpp=is_cpp)
    group_col = "group" if "group" in out.columns else None

    pairs: list = []
    for (_, _), sub in keyed.groupby(["_pid", "_ranks"], sort=False, observed=True):
        if not sub["_cpp"].any() or sub["_cpp"].all():
            continue
        py_sub = sub[~sub["_cpp"]]
        cp_sub = sub[sub["_cpp"]]
        if group_col is None:
            py_groups = [py_sub.index]
            cp_groups = [cp_sub.index]
        else:
            py_groups = [g.index for _, g in py_sub.groupby(group_col, sort=False, dropna=False, observed=True)]
            cp_groups = [g.index for _, g in cp_sub.groupby(group_col, sort=False, dropna=False, observed=True)]
            py_groups.sort(key=lambda ix: _first_time(out, ix))
            cp_groups.sort(key=lambda ix: _first_time(out, ix))
        for pi, ci in zip(py_groups, cp_groups):
            _match_group(keyed, pi, ci, pairs)

    if pairs:
        py_rows = [p for p, _ in pairs]
        cp_rows = [c for _, c in pairs]
        for col in NEW_COLUMNS:
            out.loc[py_rows, col] = out.loc[cp_rows, col].to_numpy()
        out = out.drop(index=cp_rows)
    return out

