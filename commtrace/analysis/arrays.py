"""Plain numpy views of the frame columns the analysis needs (computed once)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .native_ext import kernels


def int_or(col: pd.Series, fill) -> np.ndarray:
    """A nullable Int64 column as int64, NA -> ``fill`` (scalar or array)."""
    arr = col.array
    if isinstance(arr, pd.arrays.IntegerArray):
        vals = arr._data.astype(np.int64, copy=False)
        mask = arr._mask
        if mask.any():
            vals = np.where(mask, fill, vals)
        return vals
    return col.to_numpy(dtype=np.float64, na_value=np.nan)


@dataclass
class OpArrays:
    rank: np.ndarray       # int32
    start: np.ndarray      # int64 ns (rank 0's clock)
    end: np.ndarray        # int64 ns: t_end, else t_return, else start (never NA)
    dur: np.ndarray        # float64 ns, NaN when the op never completed (None: rank_ops.RankOps.durations, lean)
    nbytes: np.ndarray     # int64 (a lean rank task's: int32 when every value fits; integer sums are int64 either way)

    _rank_codes: tuple | None = field(default=None, repr=False, compare=False)
    _sorted: bool | None = field(default=None, repr=False, compare=False)
    _rank_rows: dict | None = field(default=None, repr=False, compare=False)

    def rank_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct ranks, per-row index into them), computed once."""
        if self._rank_codes is None and len(self.rank) and self.rank.strides == (0,):   # a rank task's one rank
            self._rank_codes = self.rank[:1].copy(), np.broadcast_to(np.int16(0), len(self.rank))   # (a view)
        if self._rank_codes is None:
            ranks, rix = dense_codes(self.rank)
            self._rank_codes = ranks, narrow(rix, len(ranks))
        return self._rank_codes

    def rank_rows(self) -> dict[int, np.ndarray | range]:
        """rank -> its row indices, ascending (computed once; see rows_by_rank); one rank's (a rank task's): a
        range, no index array (4 B/op held through the task; ``rows_of`` picks from either)."""
        if self._rank_rows is None:
            ranks, codes = self.rank_codes()
            self._rank_rows = {int(ranks[0]): range(len(codes))} if len(ranks) == 1 else _split_rows(ranks, codes)
        return self._rank_rows

    def start_sorted(self) -> bool:
        """Rows are in start-time order (as reader.load returns them), checked once."""
        if self._sorted is None:
            self._sorted = bool(len(self.start) < 2 or (self.start[1:] >= self.start[:-1]).all())
        return self._sorted

    @classmethod
    def of(cls, frame: pd.DataFrame) -> "OpArrays":
        start = frame["t_start_ns"].to_numpy(dtype=np.int64)
        ret = int_or(frame["t_return_ns"], start)
        end = int_or(frame["t_end_ns"], ret)
        return cls(rank=frame["rank"].to_numpy(dtype=np.int32), start=start, end=np.maximum(end, start),
                   dur=frame["duration_ns"].to_numpy(dtype=np.float64, na_value=np.nan),
                   nbytes=frame["bytes"].to_numpy(dtype=np.int64))


def cat_codes(col: pd.Series) -> tuple[np.ndarray, list]:
    """(codes, categories) of a column, categorical or not; NA -> -1."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), list(col.cat.categories)
    codes, uniques = pd.factorize(col)
    return codes, list(uniques)


NA_KEY = "-"


def keys_index(keys: pd.DataFrame) -> pd.Index:
    """The index of a summary table: one level per grouping column."""
    return pd.MultiIndex.from_frame(keys) if keys.shape[1] > 1 else pd.Index(keys.iloc[:, 0])


def column_codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """(code per row, key strings): categories (or distinct values) as text, then ``"-"`` for NA."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes, keys = col.cat.codes.to_numpy(), [str(x) for x in col.cat.categories]
    elif isinstance(col.array, pd.arrays.IntegerArray):   # nullable integers (bucket, root, tag)
        mask = col.array._mask
        uniq, codes = dense_codes(col.array._data[~mask]) if (~mask).any() else (np.empty(0, np.int64), None)
        full = np.full(len(col), -1, dtype=np.int64)
        if codes is not None:
            full[~mask] = codes
        codes, keys = full, [str(x) for x in uniq]
    elif col.dtype.kind in "iub":              # plain integers (rank) and booleans: no hashing needed
        uniq, codes = dense_codes(col.to_numpy())
        keys = [str(x) for x in uniq]
    else:
        codes, uniq = pd.factorize(col)
        keys = [str(x) for x in uniq]
    if len(codes) and codes.min() < 0:
        codes = np.where(codes < 0, len(keys), codes)
    return codes, keys + [NA_KEY]


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique values, code per element) for small-range integers, without sorting; codes
    in the narrowest integer type (narrow): widen before arithmetic."""
    v = np.asarray(values)
    if len(v) == 0:
        return v[:0], np.empty(0, dtype=np.int64)
    lo, hi = int(v.min()), int(v.max())
    if lo == hi:                  # one value (a rank task's rank column): nothing to count
        return v[:1].copy(), np.zeros(len(v), np.int16)
    if hi - lo > 50_000_000:
        u, inv = np.unique(v, return_inverse=True)
        return u, narrow(inv.reshape(-1), len(u))
    shifted = v if lo == 0 and v.dtype == np.int64 else np.subtract(v, lo, dtype=np.int64)
    present = np.bincount(shifted, minlength=hi - lo + 1) > 0
    uniq = np.flatnonzero(present)
    lut = narrow(np.cumsum(present) - 1, len(uniq))
    return (uniq + lo).astype(v.dtype), lut[shifted]


def narrow(codes: np.ndarray, n: int) -> np.ndarray:
    """Codes in [0, n) in the smallest signed type (less memory; radix sorts for 16-bit ones)."""
    dt = np.int16 if n < 32_000 else np.int32 if n < 2**31 else np.int64
    return codes.astype(dt, copy=False)


def stable_order(codes: np.ndarray, n: int) -> np.ndarray:
    """Stable argsort of small non-negative integer codes (radix sort when they fit 16 bits)."""
    return np.argsort(narrow(codes, n), kind="stable")


def equal_runs(key: np.ndarray):
    """(value, first, end) of each run of equal values of ``key``, in order (positions as ints)."""
    cuts = (np.flatnonzero(np.diff(key)) + 1).tolist()
    return zip(key[[0] + cuts].tolist() if len(key) else [], [0] + cuts, cuts + [len(key)])


def take_rows(column: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``column[rows]`` for reading (``rows`` ascending, distinct); no copy when they are consecutive."""
    return column[rows[0]:rows[-1] + 1] if len(rows) and rows[-1] - rows[0] + 1 == len(rows) else column[rows]

def rows_of(rows: np.ndarray | range, which: np.ndarray) -> np.ndarray:
    """``rows[which]`` (``which``: a mask or positions) for ``rows`` an index array or a range (rank_rows)."""
    if isinstance(rows, range):
        return (np.flatnonzero(which) if which.dtype == bool else which) + rows.start
    return rows[which]


def rows_by_rank(rank: np.ndarray) -> dict[int, np.ndarray]:
    """rank -> its row indices, ascending (one stable radix sort of small codes for all ranks)."""
    if not len(rank):
        return {}
    ranks, codes = dense_codes(rank)
    return _split_rows(ranks, codes)


def _split_rows(ranks: np.ndarray, codes: np.ndarray) -> dict[int, np.ndarray]:
    if not len(codes):
        return {}
    if len(ranks) == 1:           # one rank: every row, in order
        return {int(ranks[0]): np.arange(len(codes), dtype=np.int32 if len(codes) < 2**31 else np.int64)}
    order = stable_order(codes, len(ranks))
    order = order.astype(np.int32) if len(order) < 2**31 else order
    bounds = np.concatenate(([0], np.cumsum(np.bincount(codes, minlength=len(ranks)))))
    return {int(r): order[bounds[i]:bounds[i + 1]] for i, r in enumerate(ranks)}


def op_times(d_return: np.ndarray, d_end: np.ndarray, t: np.ndarray) -> tuple:
    """Per op from its start ``t`` and float32 offsets (NaN: unknown), as the reader times the
    frame: (return, return unknown, end: the known end, else the return, else t, never before
    t; duration, NaN when the end is unknown). One kernel pass when built."""
    kern = kernels()
    if kern is not None and d_return.dtype == np.float32 and d_end.dtype == np.float32:
        t = np.ascontiguousarray(t, dtype=np.int64)
        ret, unknown, end, dur = (np.empty(len(t), dt) for dt in (np.int64, bool, np.int64, np.float64))
        kern.op_times(np.ascontiguousarray(d_return), np.ascontiguousarray(d_end), t, ret, unknown, end, dur)
        return ret, unknown, end, dur
    ret, ret_ok = _offset(d_return, t)
    end, end_ok = _offset(d_end, t)
    d_int = np.where(end_ok, np.nan_to_num(d_end).astype(np.int64), 0)
    dur = np.where(end_ok, d_int.astype(np.float64), np.nan)
    return ret, ~ret_ok, np.maximum(np.where(end_ok, end, np.where(ret_ok, ret, t)), t), dur


def _offset(d: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(t + int64(d), known) for a float32 offset column with NaN for unknown (as the reader converts it)."""
    ok = ~np.isnan(d)
    return np.where(ok, np.nan_to_num(d).astype(np.int64), 0) + t, ok
