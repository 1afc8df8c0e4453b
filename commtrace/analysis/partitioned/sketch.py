"""A mergeable quantile sketch with a relative error bound (log-spaced buckets).

Durations of every op of a big run do not fit in memory: p50/p99 come from per-file histograms
over log-spaced buckets. A value x > 0 falls in bucket i = ceil(log_gamma(x)), gamma = (1 + ALPHA)
/ (1 - ALPHA); the bucket's representative 2 * gamma**i / (gamma + 1) is within ALPHA (relative) of
every value in it, so the q-quantile is within ALPHA of the value of rank floor(q * (n - 1)) (the
lower of the two the exact, interpolating quantile lies between): docs/report.md's bound. Values
<= 0 count as zeros, NaN is ignored (as the exact path does). Merging adds bucket counts, so the
result does not depend on how the run was split.
"""
from __future__ import annotations

import math

import numpy as np

ALPHA = 0.005                              # relative error bound of a sketched quantile
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(GAMMA)
_MAX_INDEX = int(math.ceil(math.log(2.0 ** 63) / _LOG_GAMMA)) + 1   # any int64 ns fits


class LogSketch:
    """Counts per log bucket (a dense int64 array over the buckets seen)."""

    __slots__ = ("lo", "counts", "zeros")

    def __init__(self, lo: int = 0, counts: np.ndarray | None = None, zeros: int = 0):
        self.lo = lo
        self.counts = np.zeros(0, np.int64) if counts is None else counts
        self.zeros = zeros

    @classmethod
    def of(cls, values: np.ndarray) -> "LogSketch":
        v = np.asarray(values, dtype=np.float64)
        v = v[~np.isnan(v)]
        pos = v[v > 0]
        zeros = int(len(v) - len(pos))
        if not len(pos):
            return cls(0, None, zeros)
        idx = np.minimum(np.ceil(np.log(pos) / _LOG_GAMMA).astype(np.int64), _MAX_INDEX)
        lo = int(idx.min())
        return cls(lo, np.bincount(idx - lo), zeros)

    @property
    def n(self) -> int:
        return int(self.counts.sum()) + self.zeros

    def merge(self, other: "LogSketch") -> "LogSketch":
        if not len(other.counts):
            return LogSketch(self.lo, self.counts, self.zeros + other.zeros)
        if not len(self.counts):
            return LogSketch(other.lo, other.counts, self.zeros + other.zeros)
        lo = min(self.lo, other.lo)
        hi = max(self.lo + len(self.counts), other.lo + len(other.counts))
        out = np.zeros(hi - lo, np.int64)
        out[self.lo - lo:self.lo - lo + len(self.counts)] += self.counts
        out[other.lo - lo:other.lo - lo + len(other.counts)] += other.counts
        return LogSketch(lo, out, self.zeros + other.zeros)

    def quantile(self, q: float) -> float:
        """The value of rank floor(q * (n - 1)) within ALPHA (relative); NaN when empty."""
        n = self.n
        if n == 0:
            return float("nan")
        rank = int(math.floor(q * (n - 1)))
        if rank < self.zeros:
            return 0.0
        cum = np.cumsum(self.counts)
        i = int(np.searchsorted(cum, rank - self.zeros, side="right"))
        return 2.0 * GAMMA ** (self.lo + i) / (GAMMA + 1.0)
