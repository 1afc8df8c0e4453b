"""Partition partials fold in chunk order, not in the order a pool hands them back: float sums
(bandwidth, busbw, the spreads' means) depend on their order in the last bits, and a report of
the same run once differed from run to run (a busbw under --partitioned)."""
import itertools

import numpy as np
import pandas as pd

from commtrace.analysis.partitioned.merge import TOP_COLUMNS, PartitionFold
from commtrace.analysis.partitioned.partition_map import PartitionPartial

# summed in chunk order these give one value; in others, other last bits (0.1 + 0.2 + 0.3 style)
VALUES = [0.1, 0.2, 0.3, 1e16, -1e16, 0.7]


def _partial(chunk: int, x: float) -> PartitionPartial:
    last = (np.array([chunk % 2]), np.array([1]), np.array([5]))   # (rank, times last, waited ns)
    bandwidth = {"by_op": ([("all_reduce",)], np.array([1], np.int64), np.array([x]), np.array([x]),
                           np.array([x]))}
    return PartitionPartial(1, pd.DataFrame(columns=TOP_COLUMNS), last, {"all_reduce": np.array([x])},
                            bandwidth, (x, 1.0 + x, 1), None, chunk)


def _figures(order) -> tuple:
    fold = PartitionFold(top=3)
    for c in order:
        fold.add(_partial(c, VALUES[c]))
    bw = fold.bandwidth["by_op"]
    return (fold.run_busbw(), [float(t[2][0]) for t in bw], fold.skew()["by_op"]["mean_ns"].tolist(),
            float(np.concatenate(fold.spreads["all_reduce"]).sum()))


def test_fold_is_the_same_whatever_order_partials_arrive():
    orders = list(itertools.permutations(range(len(VALUES))))[::37]
    in_order = _figures(range(len(VALUES)))
    sums = {sum(VALUES[c] for c in order) for order in orders}
    assert len(sums) > 1       # the values do make the order visible
    for order in orders:
        assert _figures(order) == in_order, order
