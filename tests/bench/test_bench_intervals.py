"""The 95 % interval of a median that BENCHMARKS.md prints (benchmarks/intervals.py), hand-computed."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import intervals  # noqa: E402


def test_ranks_by_hand():
    # n=5: P(B<=0) = 1/32 = 0.031 > 0.025: no 95 % interval from 5 values.
    assert intervals.median_ci_ranks(5) is None
    # n=6: P(B<=0) = 1/64 = 0.016 <= 0.025, P(B<=1) = 7/64 > 0.025: [x(1), x(6)].
    assert intervals.median_ci_ranks(6) == 1
    # n=9: P(B<=1) = 10/512 = 0.0195 <= 0.025, P(B<=2) = 46/512 = 0.0898: [x(2), x(8)].
    assert intervals.median_ci_ranks(9) == 2
    # n=41 (make bench's block count): P(B<=13) = 0.0138, P(B<=14) = 0.0298: [x(14), x(28)].
    assert intervals.median_ci_ranks(41) == 14


def test_interval_is_order_statistics():
    assert intervals.median_ci([9, 1, 8, 2, 7, 3, 6, 4, 5]) == [2, 8]
    assert intervals.median_ci([3.0, 1.0, 2.0]) is None


def test_resolves():
    assert intervals.resolves([0.99, 1.004], 1.005) is True
    assert intervals.resolves([1.006, 1.02], 1.005) is False
    assert intervals.resolves([0.99, 1.02], 1.005) is None
    assert intervals.resolves(None, 1.005) is None
