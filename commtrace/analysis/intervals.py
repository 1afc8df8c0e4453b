"""Interval arithmetic on sets of half-open time intervals [start, end) (pure functions).

A *set* is two int64 arrays (starts, ends), sorted, disjoint, non-touching (``union`` makes one).
Every "time" the report shows is such a set's length within a window: overlaps count once. Each
operation runs the analysis kernels when built (``native_ext``; COMMTRACE_NATIVE=0: off), else numpy
(``_*_numpy``, the reference), with the same results (tests/analysis/test_analysis_kernels.py).
"""
from __future__ import annotations

import numpy as np

from .native_ext import kernels

IntervalSet = tuple[np.ndarray, np.ndarray]

NEG = np.iinfo(np.int64).min // 4   # "minus infinity" that survives a subtraction
POS = np.iinfo(np.int64).max // 4


def empty() -> IntervalSet:
    return np.empty(0, np.int64), np.empty(0, np.int64)


def _i64(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int64)


def _native_set(fn, n: int, *arrays) -> IntervalSet:
    """Run a set kernel writing at most ``n`` intervals; the set it wrote (its buffers shrunk in place:
    a slice would hold all ``n``, e.g. a subtraction's len(a) + len(b), while the set lives)."""
    os, oe = np.empty(n, np.int64), np.empty(n, np.int64)
    m = fn(*arrays, os, oe)
    for buf in (os, oe):
        buf.resize(m, refcheck=False)       # in place (realloc), m <= n
    return os, oe


def union(starts, ends) -> IntervalSet:
    """The union of intervals [starts[i], ends[i]) as a set (empty intervals dropped)."""
    s, e = _i64(starts), _i64(ends)
    k = kernels()
    if k is None or s.ndim != 1:
        return _union_numpy(s, e)
    return _native_set(k.union, len(s), s, e)


def union_of(a, b) -> IntervalSet:
    """``union`` of two interval lists; the kernel merges them without a sort where each is sorted."""
    k = kernels()
    if k is None:
        return _union_numpy(np.concatenate((a[0], b[0])), np.concatenate((a[1], b[1])))
    a0, a1, b0, b1 = _i64(a[0]), _i64(a[1]), _i64(b[0]), _i64(b[1])
    return _native_set(k.union2, len(a0) + len(b0), a0, a1, b0, b1)


def _union_numpy(starts, ends) -> IntervalSet:
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if len(s) == 0:
        return empty()
    if not (s[1:] >= s[:-1]).all():
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return s[first], reach[last]


def searchsorted(a: np.ndarray, v, side: str = "left") -> np.ndarray:
    """``np.searchsorted(a, v, side)``; the kernel walks ``a`` once for values that mostly grow."""
    k = kernels()
    v = np.asarray(v)
    if k is None or v.ndim != 1 or a.dtype != np.int64 or v.dtype != np.int64:
        return np.searchsorted(a, v, side=side)
    out = np.empty(len(v), np.int64)
    k.searchsorted(_i64(a), _i64(v), out, side == "right")
    return out


def length(a: IntervalSet) -> int:
    return int((a[1] - a[0]).sum())


def covered_before(a: IntervalSet, t) -> np.ndarray:
    """For each time in ``t``: how much of set ``a`` lies before it (int64, vectorized)."""
    k = kernels()
    if k is None:
        return _covered_before_numpy(a, t)
    t = np.asarray(t, dtype=np.int64)
    out = np.empty(t.shape, np.int64)
    k.covered_before(_i64(a[0]), _i64(a[1]), _i64(t.ravel()), out.reshape(-1))
    return out


def _covered_before_numpy(a: IntervalSet, t) -> np.ndarray:
    s, e = a
    t = np.asarray(t, dtype=np.int64)
    if len(s) == 0:
        return np.zeros(t.shape, dtype=np.int64)
    # k intervals start at or before t: all of them lie before t except the part of the
    # k-th that ends after t (nothing when k == 0: the padded end is NEG)
    cum = np.concatenate(([0], np.cumsum(e - s)))
    end = np.concatenate(([NEG], e))
    k = np.searchsorted(s, t, side="right")
    return cum[k] - np.maximum(end[k] - t, 0)


def length_within(a: IntervalSet, lo, hi) -> np.ndarray:
    """For each window [lo[i], hi[i]): the length of ``a`` inside it (vectorized)."""
    lo, hi = np.broadcast_arrays(np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64))
    k = kernels()
    if k is not None:
        out = np.empty(lo.shape, np.int64)
        k.length_within(_i64(a[0]), _i64(a[1]), _i64(lo.ravel()), _i64(hi.ravel()), out.reshape(-1))
        return out
    hi = np.maximum(hi, lo)
    both = covered_before(a, np.concatenate((lo.ravel(), hi.ravel())))   # a's prefix sums built once for both ends
    return (both[lo.size:] - both[:lo.size]).reshape(lo.shape)


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """a ∩ b (two sets)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return empty()
    k = kernels()
    if k is None:
        return _intersect_numpy(a, b)
    return _native_set(k.intersect, len(a[0]) + len(b[0]), _i64(a[0]), _i64(a[1]), _i64(b[0]), _i64(b[1]))


def _intersect_numpy(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Each interval of a with each of b it overlaps (binary search): the pieces come out in order."""
    first = np.searchsorted(b[1], a[0], side="right")   # first b ending after a's start
    stop = np.searchsorted(b[0], a[1], side="left")     # b's starting before a's end
    count = np.maximum(stop - first, 0)
    total = int(count.sum())
    if total == 0:
        return empty()
    ai = np.repeat(np.arange(len(count)), count)
    bi = first[ai] + (np.arange(total) - np.repeat(np.cumsum(count) - count, count))
    s = np.maximum(a[0][ai], b[0][bi])
    e = np.minimum(a[1][ai], b[1][bi])
    keep = e > s
    return s[keep], e[keep]


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """a minus b (two sets)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    k = kernels()
    if k is None:
        return _intersect_numpy(a, complement(b))
    return _native_set(k.subtract, len(a[0]) + len(b[0]), _i64(a[0]), _i64(a[1]), _i64(b[0]), _i64(b[1]))


def complement(b: IntervalSet) -> IntervalSet:
    """Everything not in b, within [NEG, POS)."""
    s = np.concatenate(([NEG], b[1]))
    e = np.concatenate((b[0], [POS]))
    if not ((b[1] > b[0]).all() and (b[0][1:] >= b[1][:-1]).all()):
        return _union_numpy(s, e)           # not a set (empty, overlapping or unsorted pieces): the general way
    # the gaps of a set are already sorted and disjoint; only the first or last can be
    # empty (b reaches NEG or POS), and touching pieces of b leave empty gaps too
    keep = e > s
    return (s, e) if keep.all() else (s[keep], e[keep])


def clip(a: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """a ∩ [lo, hi)."""
    return intersect(a, (np.array([lo], np.int64), np.array([hi], np.int64)))
