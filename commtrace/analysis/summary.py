"""Per-op tables: ops, collectives, bytes, duration percentiles, bandwidth, share, variation.

An op is filed under its own rank's key (phase, group, ...): a collective whose ranks disagree (a
joined rank's ``join`` against the others' ``backward``) counts once under each. Bandwidth follows
nccl-tests: per collective the size S (total for gathers / scatters, else the buffer) and the
slowest rank's time T; algbw = sum S / sum T, busbw = sum(S * factor(op, n)) / sum T.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.schema import op_kind

SUMMARY_COLUMNS = ["ops", "collectives", "bytes", "total_ns", "mean_ns", "p50_ns", "p99_ns",
                   "algbw", "busbw", "share", "cv", "ranks", "observed", "untimed"]


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor for a collective over n ranks (``schema.OpKind.bus``)."""
    bus = op_kind(op).bus
    return 1.0 if n <= 1 or not bus else bus * (n - 1) / n


def qname(q: float) -> str:
    return f"p{int(round(q * 100))}_ns"


def rank_spread(rows, ranks, n_rows: int, n_ranks: int, dur, ops) -> tuple[np.ndarray, np.ndarray]:
    """Per table row: (CV of the per-rank total durations over its ranks, how many ranks). Per cell:
    ``rows``/``ranks`` its codes, ``dur``/``ops`` its total duration and op count."""
    cell = np.asarray(rows) * n_ranks + np.asarray(ranks).reshape(-1)
    per = np.bincount(cell, weights=dur, minlength=n_rows * n_ranks).reshape(n_rows, n_ranks)
    present = np.bincount(cell, weights=ops, minlength=n_rows * n_ranks).reshape(n_rows, n_ranks) > 0
    cnt = present.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(present, per, 0).sum(axis=1) / cnt
        var = np.where(present, (per - mean[:, None]) ** 2, 0).sum(axis=1) / cnt
        cv = np.where(mean > 0, np.sqrt(var) / mean, np.nan)
    return cv, cnt


def summary_columns(qs) -> list:
    """The summary table's columns, with the duration percentiles ``qs``."""
    return SUMMARY_COLUMNS[:5] + [qname(q) for q in qs] + SUMMARY_COLUMNS[7:]


def summed_columns(codes, n: int, index, count, dur, known, nbytes, qs, qv, rank_codes, n_ranks: int) -> pd.DataFrame:
    """The columns that add up over cells (per cell: row code of ``n``, op count, summed and count of
    known durations, bytes, rank code), plus percentiles ``qv`` (n x len(qs)): merge.cell_summary's."""
    total = np.bincount(codes, weights=dur, minlength=n)
    nknown = np.bincount(codes, weights=known, minlength=n)
    out = pd.DataFrame(index=index)
    out["ops"] = np.bincount(codes, weights=count, minlength=n).astype(np.int64)
    out["bytes"] = np.bincount(codes, weights=nbytes, minlength=n).astype(np.int64)
    out["total_ns"] = total
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mean_ns"] = np.where(nknown > 0, total / nknown, np.nan)
    for j, q in enumerate(qs):
        out[qname(q)] = qv[:, j]
    grand = dur.sum()
    out["share"] = total / grand if grand > 0 else np.nan
    out["cv"], out["ranks"] = rank_spread(codes, rank_codes, n, n_ranks, dur, count)
    return out


def with_collectives(out: pd.DataFrame, collectives, sT, sS, sB, observed, untimed, qs) -> pd.DataFrame:
    """``out`` plus collectives, algbw, busbw from per row the summed slowest time ``sT``, size ``sS``
    and size x bus factor ``sB``, and the counts ``observed`` and ``untimed`` (``bandwidth_terms``),
    sorted by total time."""
    out["collectives"] = collectives
    out["observed"] = np.asarray(observed).astype(np.int64)
    out["untimed"] = np.asarray(untimed).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["algbw"] = np.where(sT > 0, sS / (sT * 1e-9), np.nan)
        out["busbw"] = np.where(sT > 0, sB / (sT * 1e-9), np.nan)
    return out[summary_columns(qs)].sort_values("total_ns", ascending=False, kind="stable")


def distinct_pairs(first_row: np.ndarray, op_row: np.ndarray, op_inst: np.ndarray) -> tuple:
    """The distinct (row, instance) pairs: per instance its first op's row (``first_row``), then,
    sorted, the other rows its ops (``op_row``, ``op_inst``: all, or some) are filed under. Usually
    an instance's ops share its first op's row: a sort over the few others, not all ops."""
    k = len(first_row)
    pg, pi = first_row, np.arange(k, dtype=np.int64)
    elsewhere = op_row != pg[op_inst]
    if elsewhere.any():
        extra = np.unique(op_row[elsewhere] * k + op_inst[elsewhere])
        pg, pi = np.concatenate((pg, extra // k)), np.concatenate((pi, extra % k))
    return pg, pi


def bandwidth_terms(T: np.ndarray, S: np.ndarray, fac: np.ndarray, untimed: np.ndarray | None = None,
                    observed: np.ndarray | None = None) -> tuple:
    """Per instance (T, S, S x bus factor, observed, untimed) as floats to sum: T, S and S x factor 0
    where T or S is unknown or not positive, or where T is not the slowest rank's known time
    (``untimed``: ``match.untimed_instances``): not counted; observed 1 for a counted instance with
    an end observed by polling (``observed``: T is an upper bound); untimed 1 where ``untimed``."""
    ok = np.isfinite(T) & (T > 0) & (S > 0)
    none = np.zeros(len(T), bool)
    untimed = none if untimed is None else np.asarray(untimed, dtype=bool)
    observed = none if observed is None else np.asarray(observed, dtype=bool)
    ok &= ~untimed
    return (np.where(ok, T, 0.0), np.where(ok, S, 0.0), np.where(ok, S * fac, 0.0), (ok & observed).astype(np.float64),
            untimed.astype(np.float64))


def flags_of(inst: pd.DataFrame) -> tuple:
    """Per instance of ``match_ops``: (untimed, observed), each None when not known."""
    return tuple(inst[c].to_numpy(dtype=bool) if c in inst else None for c in ("untimed", "observed"))


def pair_sums(pg: np.ndarray, pi: np.ndarray, n: int, terms: tuple) -> list:
    """Per row (of ``n``): its (row ``pg``, instance ``pi``) pairs, and each of ``terms`` summed over them."""
    return [np.bincount(pg, minlength=n), *(np.bincount(pg, weights=v[pi], minlength=n) for v in terms)]


def bus_factors(inst: pd.DataFrame) -> np.ndarray:
    ops = inst["op"].astype(str).to_numpy()
    n = inst["expected"].to_numpy(dtype=np.int64)
    fac = np.ones(len(inst))
    if len(inst):
        combos = pd.DataFrame({"op": ops, "n": n}).drop_duplicates()
        for op, nn in combos.itertuples(index=False):
            fac[(ops == op) & (n == nn)] = bus_factor(op, int(nn))
    return fac


SPLIT_COLUMNS = ["op", "group", "seq", "by_rank"]
