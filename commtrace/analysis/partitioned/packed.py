"""Integer columns packed for the trip from a worker to the analysing process.

A rank task's per-step rows (``step_table.PER_RANK_COLUMNS``: ~20k rows a rank in a
long run) are most of what it sends back, and the pipe copies every byte twice
(write, read: ~8 % of a pool x2 analysis' samples under py-spy, 64 ranks x 100k ops,
with a worker blocked in its write until the analysing process reads).
The packing is lossless and knows nothing of what the columns mean:

* a column of equal values, or of equal successive differences, travels as two
  numbers (a rank's ``rank``; its step numbers 1, 2, 3, ...);
* a column whose successive differences take fewer bytes than its values travels
  as its first value and those differences (step begin/end times in ns: 4-byte
  differences instead of 8-byte times);
* otherwise it travels in the smallest signed integer type holding its values.

``unpack`` gives back every column in the dtype it had."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_WIDTHS = (np.int8, np.int16, np.int32, np.int64)


@dataclass
class PackedColumn:
    dtype: str                  # the column's own dtype (numpy name)
    n: int                      # rows
    kind: str                   # "ramp" (first + i * step; all equal: step 0), "delta" or "plain"
    first: int = 0              # ramp, delta: the first value
    step: int = 0               # ramp: the difference between successive values
    data: np.ndarray | None = None   # delta: the n - 1 differences; plain: the values (narrowed)

    def unpack(self) -> np.ndarray:
        dt = np.dtype(self.dtype)
        if self.kind == "plain":
            return self.data.astype(dt)
        if self.kind == "ramp":
            return (self.first + self.step * np.arange(self.n, dtype=np.int64)).astype(dt, copy=False)
        out = np.empty(self.n, np.int64)
        out[0] = self.first
        np.cumsum(self.data, dtype=np.int64, out=out[1:])
        out[1:] += self.first
        return out.astype(dt, copy=False)


def _narrowest(lo: int, hi: int):
    for t in _WIDTHS:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return t
    return np.int64


def pack_column(v: np.ndarray) -> PackedColumn:
    """One integer column (int8..int64, uint8..uint32), packed as the module doc says."""
    v = np.asarray(v)
    if v.dtype.kind not in "iu" or v.dtype == np.uint64:
        raise TypeError(f"pack_column: {v.dtype} is not a packable integer type")
    n = len(v)
    if n == 0:
        return PackedColumn(v.dtype.name, 0, "plain", data=v.copy())
    w = v.astype(np.int64, copy=False)
    lo, hi = int(w.min()), int(w.max())
    plain = _narrowest(lo, hi)
    if lo == hi:
        return PackedColumn(v.dtype.name, n, "ramp", first=lo)
    if hi - lo < 2**63:      # then no difference overflows int64: |each| <= hi - lo
        d = np.diff(w)
        dlo, dhi = int(d.min()), int(d.max())
        if dlo == dhi:
            return PackedColumn(v.dtype.name, n, "ramp", first=int(w[0]), step=dlo)
        dt = _narrowest(dlo, dhi)
        if np.dtype(dt).itemsize < np.dtype(plain).itemsize:
            return PackedColumn(v.dtype.name, n, "delta", first=int(w[0]), data=d.astype(dt))
    return PackedColumn(v.dtype.name, n, "plain", data=w.astype(plain))


@dataclass
class PackedColumns:
    """Named integer columns of equal length, packed (``pack``), back as arrays (``unpack``)."""
    n: int
    columns: dict               # name -> PackedColumn

    def __len__(self) -> int:
        return self.n

    def column(self, name: str) -> np.ndarray:
        return self.columns[name].unpack()

    def unpack(self) -> dict:
        return {k: c.unpack() for k, c in self.columns.items()}


def pack(columns: dict) -> PackedColumns:
    """``columns``: name -> 1-d integer array, all of one length."""
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"pack: columns of different lengths {sorted(lengths)}")
    return PackedColumns(lengths.pop() if lengths else 0, {k: pack_column(v) for k, v in columns.items()})
