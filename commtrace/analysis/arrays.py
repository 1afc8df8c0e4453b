"""Plain numpy views of the frame columns the analysis needs (computed once)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


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


def float_col(col: pd.Series) -> np.ndarray:
    """Any numeric column as float64 with NaN for NA."""
    return col.to_numpy(dtype=np.float64, na_value=np.nan)


@dataclass
class OpArrays:
    rank: np.ndarray       # int32
    start: np.ndarray      # int64 ns (rank 0's clock)
    end: np.ndarray        # int64 ns: t_end, else t_return, else start (never NA)
    dur: np.ndarray        # float64 ns, NaN when the op never completed
    nbytes: np.ndarray     # int64

    @classmethod
    def of(cls, frame: pd.DataFrame) -> "OpArrays":
        start = frame["t_start_ns"].to_numpy(dtype=np.int64)
        ret = int_or(frame["t_return_ns"], start)
        end = int_or(frame["t_end_ns"], ret)
        return cls(rank=frame["rank"].to_numpy(dtype=np.int32), start=start, end=np.maximum(end, start),
                   dur=float_col(frame["duration_ns"]), nbytes=frame["bytes"].to_numpy(dtype=np.int64))


def cat_codes(col: pd.Series) -> tuple[np.ndarray, list]:
    """(codes, categories) of a column, categorical or not; NA -> -1."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), list(col.cat.categories)
    codes, uniques = pd.factorize(col)
    return codes, list(uniques)


NA_KEY = "-"


@dataclass
class Groups:
    """Rows grouped by some frame columns: ``code`` per row, ``keys`` per group (sorted),
    and ``order``/``bounds`` to slice each group's rows contiguously."""
    code: np.ndarray
    keys: pd.DataFrame
    order: np.ndarray
    bounds: np.ndarray

    @property
    def n(self) -> int:
        return len(self.keys)

    def segments(self, values: np.ndarray):
        v = values[self.order]
        for i in range(self.n):
            yield i, v[self.bounds[i]:self.bounds[i + 1]]

    def count(self) -> np.ndarray:
        return np.diff(self.bounds)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.code, weights=values, minlength=self.n)

    def quantiles(self, values: np.ndarray, qs) -> np.ndarray:
        """n x len(qs) quantiles (linear, like pandas) ignoring NaN."""
        out = np.full((self.n, len(qs)), np.nan)
        for i, seg in self.segments(values):
            seg = seg[~np.isnan(seg)]
            if len(seg):
                out[i] = np.quantile(seg, qs)
        return out

    def index(self) -> pd.Index:
        return pd.MultiIndex.from_frame(self.keys) if self.keys.shape[1] > 1 else pd.Index(self.keys.iloc[:, 0])


def group_rows(frame: pd.DataFrame, by: list[str]) -> Groups:
    """Group by columns (categorical or not); NA becomes the key ``"-"``. Keys sorted."""
    combined = np.zeros(len(frame), dtype=np.int64)
    cats_all = []
    for c in by:
        codes, cats = cat_codes(frame[c])
        cats = [str(x) for x in cats] + [NA_KEY]
        codes = np.where(codes < 0, len(cats) - 1, codes).astype(np.int64)
        combined = combined * len(cats) + codes
        cats_all.append(cats)
    uniq, code = dense_codes(combined) if len(combined) else (combined, combined)
    # Decode keys and sort groups by their key strings.
    dec = []
    rest = uniq.copy()
    for cats in reversed(cats_all):
        dec.append(np.asarray(cats, dtype=object)[rest % len(cats)])
        rest = rest // len(cats)
    keys = pd.DataFrame({c: v for c, v in zip(by, reversed(dec))})
    perm = np.lexsort([keys[c].astype(str).to_numpy() for c in reversed(by)]) if len(keys) else np.empty(0, int)
    rank_of = np.empty(len(perm), dtype=np.int64)
    rank_of[perm] = np.arange(len(perm))
    code = rank_of[code] if len(code) else code.astype(np.int64)
    keys = keys.iloc[perm].reset_index(drop=True)
    order = stable_order(code, len(keys))
    bounds = np.concatenate(([0], np.cumsum(np.bincount(code, minlength=len(keys)))))
    return Groups(code, keys, order, bounds)


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique values, code per element) for small-range integers, without sorting."""
    v = np.asarray(values)
    if len(v) == 0:
        return v[:0], np.empty(0, dtype=np.int64)
    lo, hi = int(v.min()), int(v.max())
    if hi - lo > 50_000_000:
        u, inv = np.unique(v, return_inverse=True)
        return u, inv
    shifted = (v - lo).astype(np.int64)
    present = np.bincount(shifted, minlength=hi - lo + 1) > 0
    uniq = np.flatnonzero(present)
    lut = np.cumsum(present) - 1
    return (uniq + lo).astype(v.dtype), lut[shifted]


def stable_order(codes: np.ndarray, n: int) -> np.ndarray:
    """Stable argsort of small non-negative integer codes (radix sort when they fit 16 bits)."""
    if n < 32_000:
        return np.argsort(codes.astype(np.int16), kind="stable")
    return np.argsort(codes, kind="stable")
