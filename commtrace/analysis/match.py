"""Match each op to its instance across ranks: collectives by (world, group, seq); a send (``root``:
global dst) pairs with a recv (``root``: global src) by (world, group, src, dst, seq).

A recv from any source (``schema.RECV_ANY_SOURCE``) is an instance of its own, never paired, though its
``root`` names the rank it received from (its ``source`` line): its seq counts its rank's recvs from any
source (per tag), not the messages from that rank, so (src, dst, seq) would name another send (in
tests/capture/workers/p2p.py, rank 2's isend, already the pair of rank 0's irecv). Its slowest rank's
time is not known (``untimed_instances``), nor that of the send it received; the analysis keys it alike
(partition_map: root MAX_RANKS).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.rank_ranges import WORLD_STRIDE
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
        rank = frame["rank"].to_numpy(dtype=np.int64) % WORLD_STRIDE   # a rank key's rank (its world: ``w``)
        root = int_or(frame["root"], -1).astype(np.int64)
        if "variant" in frame:      # a recv from any source: no peer to pair with (the module's docstring)
            root[(frame["variant"] == RECV_ANY_SOURCE).to_numpy(bool)] = -1
        send = (op == "send").to_numpy()
        src = np.where(send, rank, root)
        dst = np.where(send, root, rank)
        pk = pd.DataFrame({"w": wc[p2p], "g": gc[p2p], "s": src[p2p], "d": dst[p2p], "q": seq[p2p]})
        pcode = pk.groupby(["w", "g", "s", "d", "q"], sort=False).ngroup().to_numpy(dtype=np.int64)
        key = key.copy()
        key[p2p] = -1 - pcode       # negative: never collides with collective keys
    codes, uniq = pd.factorize(key)
    return narrow(codes, max(len(uniq), 2**15))  # int32 for any real run: 4 B per row kept


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
