"""Interval arithmetic on sets of half-open time intervals [start, end) (pure numpy).

A *set* is a pair of int64 arrays (starts, ends), sorted by start, pairwise
disjoint and non-touching (``union`` makes one from any intervals). Every
figure the report shows as "time" is the length of such a set clipped to a
window, so overlapping ops are never counted twice (docs/report.md).
"""
from __future__ import annotations

import numpy as np

IntervalSet = tuple[np.ndarray, np.ndarray]

NEG = np.iinfo(np.int64).min // 4   # "minus infinity" that survives a subtraction
POS = np.iinfo(np.int64).max // 4


def empty() -> IntervalSet:
    return np.empty(0, np.int64), np.empty(0, np.int64)


def union(starts, ends) -> IntervalSet:
    """The union of intervals [starts[i], ends[i]) as a set (empty intervals dropped)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
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


def length(a: IntervalSet) -> int:
    return int((a[1] - a[0]).sum())


def covered_before(a: IntervalSet, t) -> np.ndarray:
    """For each time in ``t``: how much of set ``a`` lies before it (int64, vectorized)."""
    s, e = a
    t = np.asarray(t, dtype=np.int64)
    if len(s) == 0:
        return np.zeros(t.shape, dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(e - s)))
    k = np.searchsorted(s, t, side="right")          # intervals starting at or before t
    last = np.maximum(k - 1, 0)
    partial = np.clip(t - s[last], 0, e[last] - s[last])
    return np.where(k > 0, cum[np.maximum(k - 1, 0)] + partial, 0)


def length_within(a: IntervalSet, lo, hi) -> np.ndarray:
    """For each window [lo[i], hi[i]): the length of ``a`` inside it (vectorized)."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.maximum(np.asarray(hi, dtype=np.int64), lo)
    return covered_before(a, hi) - covered_before(a, lo)


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """a ∩ b."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return empty()
    # Every piece of the intersection starts at a start of a or of b, inside both;
    # it ends where the first of the two intervals containing that start ends.
    starts = np.unique(np.concatenate((a[0], b[0])))
    return union(starts, np.minimum(_end_of_containing(a, starts), _end_of_containing(b, starts)))


def _end_of_containing(x: IntervalSet, t: np.ndarray) -> np.ndarray:
    """The end of the interval of ``x`` that contains each ``t`` (``t`` itself if none)."""
    k = np.maximum(np.searchsorted(x[0], t, side="right") - 1, 0)
    inside = (x[0][k] <= t) & (t < x[1][k])
    return np.where(inside, x[1][k], t)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """a minus b."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    return intersect(a, complement(b))


def complement(b: IntervalSet) -> IntervalSet:
    """Everything not in b, within [NEG, POS)."""
    s = np.concatenate(([NEG], b[1]))
    e = np.concatenate((b[0], [POS]))
    return union(s, e)


def clip(a: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """a ∩ [lo, hi)."""
    return intersect(a, (np.array([lo], np.int64), np.array([hi], np.int64)))
