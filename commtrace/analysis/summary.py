"""Per-op tables: counts, bytes, duration percentiles, bandwidth, share, variation.

Bandwidth follows nccl-tests: per collective instance the size S (all_gather,
reduce_scatter, gather, scatter: the total size; others: the buffer) and the
slowest rank's time T; algbw = sum S / sum T, busbw = sum(S * factor(op, n)) / sum T.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .arrays import Cells, Groups, OpArrays, dense_codes, keys_index, narrow
from .match import Matched

SUMMARY_COLUMNS = ["calls", "count", "bytes", "total_ns", "mean_ns", "p50_ns", "p99_ns",
                   "algbw", "busbw", "share", "cv", "ranks"]


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor for a collective over n ranks."""
    if n <= 1:
        return 1.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def qname(q: float) -> str:
    return f"p{int(round(q * 100))}_ns"


def op_summary(frame: pd.DataFrame, matched: Matched, by=("op",), arrays: OpArrays | None = None,
               qs=(0.5, 0.99), cells: Cells | None = None) -> pd.DataFrame:
    """One row per group of ``by`` (frame columns: ("op",), ("op", "group"), ("phase", "op"), ...).

    Columns: calls (ops over all ranks), count (matched instances), bytes (sum over
    ranks), total_ns, mean_ns, p50_ns, p99_ns (per-rank durations), algbw, busbw
    (bytes/s), share (of all communication time), cv (coefficient of variation of the
    per-rank total time, population std / mean, as mpiP), ranks. Sorted by total_ns.

    ``cells`` (from :func:`summary_cells`) lets several summaries share one pass over
    the rows; it must cover ``by``.
    """
    by = list(by)
    cols = SUMMARY_COLUMNS[:5] + [qname(q) for q in qs] + SUMMARY_COLUMNS[7:]
    if len(frame) == 0:
        return pd.DataFrame(columns=by + cols).set_index(by)
    a = arrays or OpArrays.of(frame)
    if cells is None or not set(by) <= set(cells.cells.columns):
        cells = summary_cells(frame, by, a)
    c = cells.cells
    gcell, keys = c.coarsen(by)
    n = len(keys)
    total = np.bincount(gcell, weights=cells.dur, minlength=n)
    nknown = np.bincount(gcell, weights=cells.known, minlength=n)
    out = pd.DataFrame(index=keys_index(keys))
    out["calls"] = np.bincount(gcell, weights=cells.count, minlength=n).astype(np.int64)
    out["bytes"] = np.bincount(gcell, weights=cells.nbytes, minlength=n).astype(np.int64)
    out["total_ns"] = total
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mean_ns"] = np.where(nknown > 0, total / nknown, np.nan)
    row_groups = Groups.of_codes(narrow(gcell, n)[c.code], keys)
    qv = row_groups.quantiles(a.dur, list(qs))
    del row_groups
    for j, q in enumerate(qs):
        out[qname(q)] = qv[:, j]
    grand = cells.dur.sum()
    out["share"] = total / grand if grand > 0 else np.nan
    # Per-rank totals -> CV across the ranks that called the op.
    nr = len(c.keys["rank"])
    cell = gcell * nr + c.key_codes["rank"]
    per = np.bincount(cell, weights=cells.dur, minlength=n * nr).reshape(n, nr)
    present = np.bincount(cell, weights=cells.count, minlength=n * nr).reshape(n, nr) > 0
    cnt = present.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(present, per, 0).sum(axis=1) / cnt
        var = np.where(present, (per - mean[:, None]) ** 2, 0).sum(axis=1) / cnt
        out["cv"] = np.where(mean > 0, np.sqrt(var) / mean, np.nan)
    out["ranks"] = cnt
    # Instances: count and bandwidth, attributed to the group of their first row.
    inst = matched.instances
    icode = gcell[c.code[inst["row"].to_numpy(dtype=np.int64)]] if len(inst) else np.empty(0, np.int64)
    T = inst["slowest_ns"].to_numpy(dtype=np.float64)
    S = inst["size_bytes"].to_numpy(dtype=np.float64)
    fac = bus_factors(inst)
    ok = np.isfinite(T) & (T > 0) & (S > 0)
    sT = np.bincount(icode, weights=np.where(ok, T, 0.0), minlength=n)
    sS = np.bincount(icode, weights=np.where(ok, S, 0.0), minlength=n)
    sB = np.bincount(icode, weights=np.where(ok, S * fac, 0.0), minlength=n)
    out["count"] = np.bincount(icode, minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["algbw"] = np.where(sT > 0, sS / (sT * 1e-9), np.nan)
        out["busbw"] = np.where(sT > 0, sB / (sT * 1e-9), np.nan)
    return out[cols].sort_values("total_ns", ascending=False, kind="stable")


@dataclass
class SummaryCells:
    """Rows binned by the summary columns plus rank, with the additive per-cell
    numbers every op_summary needs (row count, summed duration, known durations, bytes)."""
    cells: Cells
    count: np.ndarray
    dur: np.ndarray
    known: np.ndarray
    nbytes: np.ndarray


def summary_cells(frame: pd.DataFrame, columns, arrays: OpArrays | None = None) -> SummaryCells:
    a = arrays or OpArrays.of(frame)
    c = Cells.of(frame, [col for col in columns if col != "rank"] + ["rank"], {"rank": a.rank_column_codes()})
    known = ~np.isnan(a.dur)
    return SummaryCells(c, c.sum().astype(np.float64), c.sum(np.where(known, a.dur, 0.0)),
                        c.sum(known.astype(np.float64)), c.sum(a.nbytes.astype(np.float64)))


def bus_factors(inst: pd.DataFrame) -> np.ndarray:
    ops = inst["op"].astype(str).to_numpy()
    n = inst["expected"].to_numpy(dtype=np.int64)
    fac = np.ones(len(inst))
    if len(inst):
        combos = pd.DataFrame({"op": ops, "n": n}).drop_duplicates()
        for op, nn in combos.itertuples(index=False):
            fac[(ops == op) & (n == nn)] = bus_factor(op, int(nn))
    return fac


def has_values(frame: pd.DataFrame, col: str) -> bool:
    return col in frame and len(frame) > 0 and bool(frame[col].notna().any())


def iteration_summary(frame: pd.DataFrame, arrays: OpArrays | None = None) -> pd.DataFrame:
    """Per training step (iteration > 0): ops, bytes, comm_ns (mean over ranks of the
    summed op time), span_ns (first call to last completion), slowest_rank."""
    cols = ["ops", "bytes", "comm_ns", "span_ns", "slowest_rank"]
    if len(frame) == 0 or not (frame["iteration"].to_numpy() > 0).any():
        return pd.DataFrame(columns=cols)
    a = arrays or OpArrays.of(frame)
    it_all = frame["iteration"].to_numpy()
    sel = it_all > 0
    every = bool(sel.all())

    def rows(x):  # the selected rows (no copy when every row is selected)
        return x if every else x[sel]
    its, ix = dense_codes(rows(it_all))
    ranks, rix = a.rank_codes()
    n, R = len(its), len(ranks)
    cell = ix.astype(np.int64)
    cell *= R
    cell += rows(rix)
    dur = rows(a.dur)
    known = ~np.isnan(dur)
    per = np.bincount(cell, weights=np.where(known, dur, 0.0), minlength=n * R).reshape(n, R)
    del known
    present = np.bincount(cell, minlength=n * R).reshape(n, R) > 0
    del cell
    s_series = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(s_series, ix, rows(a.start))
    e_series = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(e_series, ix, rows(a.end))
    out = pd.DataFrame({
        "ops": np.bincount(ix, minlength=n),
        "bytes": np.bincount(ix, weights=rows(a.nbytes).astype(np.float64), minlength=n).astype(np.int64),
        "comm_ns": per.sum(axis=1) / np.maximum(present.sum(axis=1), 1),
        "span_ns": e_series - s_series,
        "slowest_rank": ranks[np.argmax(np.where(present, per, -1), axis=1)],
    }, index=pd.Index(its, name="iteration"))
    return out
