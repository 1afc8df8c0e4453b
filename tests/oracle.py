"""The reference the report's tables are tested against: ``op_summary``, the per-op table computed
straight from one frame (``commtrace.load``'s rows, ``match.match_ops``' instances), row by row.

The report computes the same table another way (``analysis.partitioned``: summary cells per rank,
bandwidth per seq chunk, folded by ``merge``); the tests compare the two. Only the definitions are
shared (``analysis.summary``: the summed and bandwidth columns), not the binning of rows or the
matching of instances."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from commtrace.analysis.arrays import NA_KEY, OpArrays, column_codes, dense_codes, keys_index, narrow
from commtrace.analysis.match import Matched
from commtrace.analysis.summary import (bandwidth_terms, bus_factors, distinct_pairs, flags_of, pair_sums,
                                        summary_columns, summed_columns, with_collectives)


def op_summary(frame: pd.DataFrame, matched: Matched, by=("op",), arrays: OpArrays | None = None,
               qs=(0.5, 0.99)) -> pd.DataFrame:
    """One row per group of ``by`` (frame columns), sorted by total_ns: ops (all ranks), collectives
    (instances with an op in the row), bytes, total_ns, mean_ns, p50_ns, p99_ns (per-op durations),
    algbw, busbw (bytes/s), share (of all rows' time), cv (of the per-rank total time, population
    std / mean, as mpiP), ranks, observed (collectives in algbw/busbw with an end observed by polling:
    the bandwidth is a lower bound), untimed (collectives left out of algbw/busbw: their slowest rank's
    time is not known, ``match.untimed_instances``)."""
    by = list(by)
    if len(frame) == 0:
        return pd.DataFrame(columns=by + summary_columns(qs)).set_index(by)
    a = arrays or OpArrays.of(frame)
    ranks, rank_of_row = a.rank_codes()
    c = Cells.of(frame, [k for k in by if k != "rank"] + ["rank"], {"rank": (rank_of_row, [str(r) for r in ranks] + [NA_KEY])})
    known = ~np.isnan(a.dur)
    gcell, keys = c.coarsen(by)
    n = len(keys)
    qv = group_quantiles(narrow(gcell, n)[c.code], n, a.dur, list(qs))
    out = summed_columns(gcell, n, keys_index(keys), c.sum().astype(np.float64), c.sum(np.where(known, a.dur, 0.0)),
                         c.sum(known.astype(np.float64)), c.sum(a.nbytes.astype(np.float64)), qs, qv,
                         c.key_codes["rank"], len(c.keys["rank"]))
    # Collectives and bandwidth: every (row group, instance) pair counts once.
    rg, inst = gcell[c.code].astype(np.int64, copy=False), matched.instances
    pg, pi = distinct_pairs(rg[inst["row"].to_numpy(np.int64)], rg, matched.inst.astype(np.int64, copy=False))
    terms = bandwidth_terms(inst["slowest_ns"].to_numpy(dtype=np.float64),
                            inst["size_bytes"].to_numpy(dtype=np.float64), bus_factors(inst), *flags_of(inst))
    return with_collectives(out, *pair_sums(pg, pi, n, terms), qs)


@dataclass
class Cells:
    """The rows binned by several columns (the finest partition): a table over some of them adds up cells."""
    columns: list[str]
    code: np.ndarray                  # per row: cell index
    key_codes: dict[str, np.ndarray]  # per cell and column: index into keys[column]
    keys: dict[str, list[str]]

    @classmethod
    def of(cls, frame: pd.DataFrame, columns, known_codes: dict) -> "Cells":
        """``known_codes``: column -> (codes, keys) already computed (as column_codes gives them)."""
        columns = list(columns)
        combined = np.zeros(len(frame), dtype=np.int64)
        keys = {}
        for c in columns:
            codes, keys[c] = known_codes.get(c) or column_codes(frame[c])
            combined = combined * len(keys[c]) + codes
        uniq, code = dense_codes(combined)
        key_codes = {}
        rest = uniq.astype(np.int64)
        for c in reversed(columns):
            key_codes[c] = rest % len(keys[c])
            rest = rest // len(keys[c])
        return cls(columns, narrow(code, len(uniq)), key_codes, keys)

    @property
    def n(self) -> int:
        return len(self.key_codes[self.columns[0]])

    def sum(self, values: np.ndarray | None = None) -> np.ndarray:
        """Per cell: the sum of ``values`` (row count when None)."""
        return np.bincount(self.code, weights=values, minlength=self.n)

    def coarsen(self, by) -> tuple[np.ndarray, pd.DataFrame]:
        """(group per cell, key strings per group) grouping by ``by``; groups sorted by key strings."""
        combined = np.zeros(self.n, dtype=np.int64)
        for c in by:
            combined = combined * len(self.keys[c]) + self.key_codes[c]
        uniq, gcell = np.unique(combined, return_inverse=True)
        dec, rest = {}, uniq
        for c in reversed(by):
            dec[c] = np.asarray(self.keys[c], dtype=object)[rest % len(self.keys[c])]
            rest = rest // len(self.keys[c])
        keys = pd.DataFrame({c: dec[c] for c in by})
        perm = np.lexsort([keys[c].astype(str).to_numpy() for c in reversed(by)])
        rank_of = np.empty(len(perm), dtype=np.int64)
        rank_of[perm] = np.arange(len(perm))
        return rank_of[gcell.reshape(-1)], keys.iloc[perm].reset_index(drop=True)


def group_quantiles(code: np.ndarray, n: int, values: np.ndarray, qs) -> np.ndarray:
    """n x len(qs) quantiles (linear, like pandas) of ``values`` per group (``code`` per row, of
    ``n``), ignoring NaN."""
    out = np.full((n, len(qs)), np.nan)
    order = np.argsort(code, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(code, minlength=n))))
    for i in range(n):
        seg = values[order[bounds[i]:bounds[i + 1]]]
        seg = seg[~np.isnan(seg)]
        if len(seg):
            out[i] = np.quantile(seg, qs)
    return out
