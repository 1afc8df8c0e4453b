"""Confidence intervals for the medians the benchmarks report.

The benchmarks report the median over blocks of paired differences or ratios.
Its interval here is the distribution-free one from order statistics: with the
n values sorted, [x_(k), x_(n+1-k)] (1-based) covers the true median with
probability at least ``level``, for the largest k with
P(B <= k-1) <= (1 - level)/2, B ~ Binomial(n, 1/2). It assumes only that the
blocks are independent draws -- not a normal distribution, which the wake-up
spikes of a shared VM are far from. Deterministic (no resampling), so a
rerun of the analysis on the same numbers gives the same interval.
"""
from __future__ import annotations

import math


def median_ci_ranks(n: int, level: float = 0.95) -> int | None:
    """k (1-based) such that [x_(k), x_(n+1-k)] is the ``level`` interval; None when n is too small."""
    tail = (1.0 - level) / 2.0
    total = 2 ** n
    k, cum = None, 0
    for j in range(n // 2 + 1):       # cum = P(B <= j)
        cum += math.comb(n, j)
        if cum / total <= tail:
            k = j + 1
        else:
            break
    return k


def median_ci(values, level: float = 0.95) -> list[float] | None:
    """[low, high] interval for the median of ``values``; None with too few values (< 6 at 95 %)."""
    xs = sorted(values)
    k = median_ci_ranks(len(xs), level)
    if k is None:
        return None
    return [xs[k - 1], xs[len(xs) - k]]


def resolves(ci, limit: float) -> bool | None:
    """Whether an interval settles "median <= limit": True (all of it at or below), False
    (all of it above), None (it straddles the limit, or there is no interval)."""
    if not ci:
        return None
    if ci[1] <= limit:
        return True
    if ci[0] > limit:
        return False
    return None
