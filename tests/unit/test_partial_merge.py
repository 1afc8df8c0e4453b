"""analysis.partitioned.merge: the summary's exact percentiles and the largest spreads, from partial results."""
import numpy as np
import pytest


def test_exact_quantiles_are_numpys_bit_for_bit():
    """merge.exact_quantiles selects among float32 durations and interpolates as numpy does."""
    from commtrace.analysis.partitioned.merge import exact_quantiles
    qs = (0.5, 0.99)
    # by hand: 1..10 -> p50 at virtual index 4.5 = 5.5; p99 at 8.91 -> 9 + 0.91 * (10 - 9) = 9.91
    got = exact_quantiles([np.arange(1, 6, dtype=np.float32), np.arange(6, 11, dtype=np.float32)], qs)
    assert got[0] == 5.5 and got[1] == np.quantile(np.arange(1.0, 11.0), 0.99) == pytest.approx(9.91)
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 7, 100, 10_001):
        for kind in ("f32", "f64", "mixed", "signed"):
            vals = np.round(rng.exponential(1e6, n))                    # ns: integers, float32-exact below 2^24
            parts = np.array_split(vals, 3 if n > 3 else 1)
            if kind == "f32":
                parts = [p.astype(np.float32) for p in parts]
            elif kind == "signed":     # a sign bit (-0.0 too): selected among floats, not their bits
                parts = [np.append(p - 1e6, -0.0).astype(np.float32) for p in parts]
            elif kind == "mixed":
                parts = [p.astype(np.float32) if i % 2 else p * 1.000001 for i, p in enumerate(parts)]
            want = np.quantile(np.concatenate([np.asarray(p, np.float64) for p in parts]), qs)
            got = exact_quantiles(parts, qs)
            assert got.tobytes() == want.tobytes(), (n, kind)


def test_groupby_quantiles_are_pandas_bit_for_bit():
    """merge.groupby_quantiles (the skew table's p50 / p99, without pandas' argsort of every spread) equals
    pandas' groupby quantile bit for bit, whatever the pieces."""
    import pandas as pd
    from commtrace.analysis.partitioned.merge import groupby_quantiles
    rng = np.random.default_rng(2)
    qs = (0.5, 0.99, 0.0, 1.0, 0.25)
    for n in (1, 2, 3, 100, 101, 4_097, 30_001):
        for kind in ("ns", "ties", "floats"):
            vals = {"ns": np.round(rng.exponential(1e5, n)), "ties": rng.integers(0, 4, n).astype(np.float64),
                    "floats": rng.exponential(1.7, n)}[kind]
            g = pd.Series(vals).groupby(np.zeros(n, np.int8))
            want = [float(g.quantile(q).iloc[0]) for q in qs]
            for parts in (1, 3):
                got = groupby_quantiles(np.array_split(vals, parts if n > parts else 1), qs)
                assert np.array(got).tobytes() == np.array(want).tobytes(), (n, kind, parts, got, want)


def test_largest_spreads_do_not_depend_on_arrival_order():
    """Two partitions' top instances with equal spread, start and first rank come out in
    (world, group, seq) order whichever partition's result is folded first."""
    import pandas as pd
    from commtrace.analysis.partitioned.merge import PartitionFold
    from commtrace.analysis.partitioned.partition_map import TOP_COLUMNS

    def part(seq):
        row = dict(op="all_reduce", world="w", group="0", seq=seq, ranks=2, expected=2, first_start_ns=10,
                   last_start_ns=15, first_rank=0, last_rank=1, spread_ns=5, slowest_ns=1.0, size_bytes=4,
                   end_ns=20, p2p=False)
        return pd.DataFrame([row], columns=TOP_COLUMNS)

    tops = []
    for order in ((7, 3), (3, 7)):
        f = PartitionFold(top=10)
        tops.append(f._top([part(order[0]), part(order[1])])["seq"].tolist())
    assert tops == [[3, 7], [3, 7]]


def test_chunk_runs_by_hand():
    """plan.chunk_runs: per (group, seq chunk) key, its first and last record (records in call order)."""
    from commtrace.analysis.partitioned.plan import chunk_runs
    group = np.array([0, 0, 1, 0, 1, 0], np.uint16)
    seq = np.array([1, 2, 1, 3, 2, 4], np.uint32)
    keys, first, last = chunk_runs(group, seq, 3)    # chunks: seq // 3 -> 0 0 0 1 0 1
    assert keys.tolist() == [0, 1, 1 << 32] and first.tolist() == [0, 3, 2] and last.tolist() == [1, 5, 4]
