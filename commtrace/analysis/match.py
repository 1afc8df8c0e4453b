"""Match each op to its instance across ranks: collectives by (world, group, seq); a send (``root``:
global dst) pairs with a recv (``root``: global src, for a recv from any source the rank it received
from) by (world, group, src, dst, tag, pair_seq): the k-th send from s to d with tag t and the k-th recv
on d of a message from s with tag t (``trace.p2p_order``: the rule, and where it cannot know k). An op
whose pair_seq is not known (0) is an instance of its own. A pair's times are those of any instance: its
first and last start, its slowest op's duration (the send's or the recv's), its largest size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.rank_ranges import WORLD_STRIDE
from ..trace.p2p_order import pair_seqs
from ..trace.schema import P2P_OPS, RECV_ANY_SOURCE, TOTAL_SIZE_OPS
from .arrays import OpArrays, cat_codes, int_or, narrow


@dataclass
class Matched:
    inst: np.ndarray            # per frame row: instance index (0..n-1)
    instances: pd.DataFrame     # one row per instance (see match_ops)


def instance_keys(frame: pd.DataFrame) -> np.ndarray:
    """Per-row instance index, numbered 0.. in order of first appearance."""
    n = len(frame)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    wc, _ = cat_codes(frame["world"])
    gc, gcats = cat_codes(frame["group"])
    seq = frame["seq"].to_numpy(dtype=np.int64)
    key = ((wc.astype(np.int64) + 1) * (len(gcats) + 1) + (gc.astype(np.int64) + 1)) << 32 | (seq & 0xFFFFFFFF)
    op = frame["op"]
    p2p = op.isin(P2P_OPS).to_numpy()
    if p2p.any():
        key = key.copy()
        key[p2p] = -1 - p2p_pair_codes(frame[p2p], wc[p2p], gc[p2p])   # negative: never a collective's key
    codes, uniq = pd.factorize(key)
    return narrow(codes, max(len(uniq), 2**15))  # int32 for any real run: 4 B per row kept


def p2p_pair_codes(rows: pd.DataFrame, world_codes: np.ndarray | None = None,
                   group_codes: np.ndarray | None = None) -> np.ndarray:
    """Per send/recv row of ``rows``: the code of its pair (world, group, src, dst, tag, pair_seq), equal
    for a send and the recv that took it; a row whose pair_seq is not known (0) gets a code of its own."""
    n = len(rows)
    wc = cat_codes(rows["world"])[0] if world_codes is None else world_codes
    gc = cat_codes(rows["group"])[0] if group_codes is None else group_codes
    rank = rows["rank"].to_numpy(dtype=np.int64) % WORLD_STRIDE   # a rank key's rank (its world: ``w``)
    root = int_or(rows["root"], -1).astype(np.int64)
    send = (rows["op"] == "send").to_numpy()
    pair = frame_pair_seqs(rows)
    lone = -1 - np.arange(n, dtype=np.int64)          # not known: a pair of its own
    pk = pd.DataFrame({"w": wc, "g": gc, "s": np.where(send, rank, root), "d": np.where(send, root, rank),
                       "t": _tags(rows), "q": np.where(pair > 0, pair, lone)})
    return pk.groupby(["w", "g", "s", "d", "t", "q"], sort=False).ngroup().to_numpy(dtype=np.int64)


def frame_pair_seqs(rows: pd.DataFrame) -> np.ndarray:
    """Per send/recv row of ``rows``: its pair_seq (trace.p2p_order): the frame's column (reader.build_frame
    numbers each process's ops whole), else (a frame made without it) numbered from the rows themselves by
    the same rule (a process: its ``file``, else its rank; call order: start time)."""
    if "pair_seq" in rows:
        return rows["pair_seq"].to_numpy(dtype=np.int64)
    n = len(rows)
    proc = cat_codes(rows["file"])[0] if "file" in rows else rows["rank"].to_numpy(np.int64)
    root = int_or(rows["root"], -1).astype(np.int64)
    tag = _tags(rows)
    anys = (rows["variant"] == RECV_ANY_SOURCE).to_numpy(bool) if "variant" in rows else np.zeros(n, bool)
    return pair_seqs(proc, cat_codes(rows["group"])[0], (rows["op"] == "send").to_numpy(), root, tag,
                     np.where(anys, tag, root), anys, rows["t_start_ns"].to_numpy(np.int64),
                     rows["seq"].to_numpy(np.int64))


def _tags(rows: pd.DataFrame) -> np.ndarray:
    return int_or(rows["tag"], 0).astype(np.int64) if "tag" in rows else np.zeros(len(rows), np.int64)


def instances_with(inst: np.ndarray, k: int, rows) -> np.ndarray:
    """Per instance (of ``k``): whether one of its rows is true in ``rows``."""
    return np.bincount(inst, weights=np.asarray(rows, dtype=np.float64), minlength=k) > 0


def untimed_instances(inst: np.ndarray, k: int, failed_rows, dur: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per instance (of ``k``): whether its slowest rank's time is not known: one of its rows failed
    (``failed_rows``: it moved an unknown part of its size) or has no known end (``dur`` NaN: in
    flight at the trace's end, its process died), or it has fewer rows than its ``expected`` ranks
    (a rank never called it, or is not in the trace or the window)."""
    unknown = np.asarray(failed_rows, dtype=bool) | np.isnan(dur)
    return instances_with(inst, k, unknown) | (np.bincount(inst, minlength=k) < expected)


def match_ops(frame: pd.DataFrame, arrays: OpArrays | None = None) -> Matched:
    """Instances with: op, world, group, seq, ranks (callers), expected (group size), first/last arrival
    and rank, spread_ns, slowest_ns (longest known per-rank duration), size_bytes (nccl-tests), end_ns, p2p,
    untimed (its slowest rank's time is not known: ``untimed_instances``), observed (an op's end was
    observed by polling, ``end_observed``: an upper bound)."""
    a = arrays or OpArrays.of(frame)
    inst = instance_keys(frame)
    if len(inst) == 0:
        cols = ["op", "world", "group", "seq", "ranks", "expected", "first_start_ns", "last_start_ns",
                "first_rank", "last_rank", "spread_ns", "slowest_ns", "size_bytes", "end_ns", "p2p",
                "untimed", "observed", "row"]
        return Matched(inst, pd.DataFrame({c: [] for c in cols}))
    if not a.start_sorted():
        raise ValueError("match_ops: the frame must be sorted by t_start_ns (as reader.load returns it)")
    opcodes, opcats = cat_codes(frame["op"])
    size = a.nbytes
    if "out_bytes" in frame:
        tot_cat = np.append(np.isin(np.asarray(opcats, dtype=object), TOTAL_SIZE_OPS), False)
        tot = tot_cat[opcodes]  # code -1 (NA) -> the appended False
        size = np.where(tot, np.maximum(size, frame["out_bytes"].to_numpy(dtype=np.int64)), size)
    k = int(inst.max()) + 1
    # Instances are numbered in order of first appearance, and rows are start-sorted: an instance's
    # first row (where the running maximum grows) is its first caller.
    first_row = np.flatnonzero(np.concatenate(([True], np.diff(np.maximum.accumulate(inst)) > 0)))
    last_row = np.full(k, -1, dtype=np.int64)
    np.maximum.at(last_row, inst, np.arange(len(inst), dtype=np.int64))
    slowest = np.full(k, np.nan)
    np.fmax.at(slowest, inst, a.dur)
    size_max = np.zeros(k, dtype=np.int64)
    np.maximum.at(size_max, inst, size)
    end_max = np.full(k, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(end_max, inst, a.end)
    agg = pd.DataFrame({
        "ranks": np.bincount(inst, minlength=k),
        "first_start_ns": a.start[first_row], "last_start_ns": a.start[last_row],
        "first_rank": a.rank[first_row], "last_rank": a.rank[last_row],
        "slowest_ns": slowest, "size_bytes": size_max, "end_ns": end_max,
        "seq": frame["seq"].to_numpy(dtype=np.int64)[first_row],
        "expected": frame["group_size"].to_numpy(dtype=np.int64)[first_row],
    })
    agg["op"] = pd.Categorical.from_codes(opcodes[first_row], categories=opcats)
    agg["world"] = frame["world"].iloc[first_row].to_numpy()
    agg["group"] = frame["group"].iloc[first_row].to_numpy()
    agg["spread_ns"] = agg["last_start_ns"] - agg["first_start_ns"]
    agg["p2p"] = agg["op"].isin(P2P_OPS).to_numpy()
    agg["row"] = first_row
    agg.loc[agg["p2p"].to_numpy(), "expected"] = 2
    failed = (frame["status"] == "failed").to_numpy(dtype=bool) if "status" in frame else np.zeros(len(inst), bool)
    agg["untimed"] = untimed_instances(inst, k, failed, a.dur, agg["expected"].to_numpy(np.int64))
    agg["observed"] = instances_with(inst, k, frame["end_observed"].to_numpy(dtype=bool)) if "end_observed" in frame \
        else False
    return Matched(inst, agg.reset_index(drop=True))
