"""Interval sets: union, intersection, difference, lengths inside windows (hand-computed)."""
import numpy as np

from commtrace.analysis import intervals as iv


def S(*pairs):
    return iv.union([p[0] for p in pairs], [p[1] for p in pairs])


def test_union_merges_overlaps_and_drops_empty():
    s, e = S((5, 10), (0, 4), (3, 6), (20, 30), (25, 28), (40, 40))
    assert s.tolist() == [0, 20] and e.tolist() == [10, 30]


def test_intersect_and_subtract():
    a = S((0, 10), (20, 30))
    b = S((2, 6), (8, 22), (25, 40))
    i = iv.intersect(a, b)
    assert list(zip(*map(list, i))) == [(2, 6), (8, 10), (20, 22), (25, 30)]
    d = iv.subtract(a, b)
    assert list(zip(*map(list, d))) == [(0, 2), (6, 8), (22, 25)]
    assert iv.length(i) + iv.length(d) == iv.length(a)


def test_length_within_windows():
    a = S((0, 10), (20, 30))
    assert iv.length_within(a, [0, 4, 25, 10, 35], [100, 9, 28, 20, 50]).tolist() == [20, 5, 3, 0, 0]
    assert iv.covered_before(a, np.array([-5, 5, 15, 25, 99])).tolist() == [0, 5, 10, 15, 20]


def test_empty_sets():
    e = iv.empty()
    assert iv.length(iv.intersect(e, S((0, 5)))) == 0
    assert iv.length(iv.subtract(S((0, 5)), e)) == 5
    assert iv.length_within(e, [0], [10]).tolist() == [0]


def test_against_a_brute_force_reference():
    """Random small sets: every operation agrees with a set-of-integer-points model."""
    rng = np.random.default_rng(0)

    def points(a):
        return {t for s, e in zip(*a) for t in range(s, e)}

    for _ in range(300):
        xs = [S(*[tuple(sorted(rng.integers(0, 60, 2))) for _ in range(rng.integers(0, 6))]) for _ in range(2)]
        a, b = xs
        assert points(iv.intersect(a, b)) == points(a) & points(b)
        assert points(iv.subtract(a, b)) == points(a) - points(b)
        lo, hi = sorted(rng.integers(0, 60, 2))
        assert iv.length_within(a, [lo], [hi])[0] == len({t for t in points(a) if lo <= t < hi})
        for x in (iv.intersect(a, b), iv.subtract(a, b)):   # results are sets: sorted, disjoint, non-empty
            assert (x[1] > x[0]).all() and (x[0][1:] > x[1][:-1]).all()


def test_complement_length_within_and_covered_before_against_brute_force():
    """Random small sets: complement, prefix coverage and window lengths agree with a
    set-of-integer-points model; on pairs that are not sets (overlapping, touching, empty
    pieces) complement's shortcut gives what its general form (the union of the gaps) gives."""
    rng = np.random.default_rng(1)

    def points(a):
        return {t for s, e in zip(*a) for t in range(max(s, -10), min(e, 70))}

    for _ in range(300):
        raw = sorted(tuple(sorted(rng.integers(0, 60, 2))) for _ in range(rng.integers(0, 6)))
        pairs = (np.array([p[0] for p in raw], np.int64), np.array([p[1] for p in raw], np.int64))
        a = iv.union(*pairs)
        c = iv.complement(a)
        assert points(c) == set(range(-10, 70)) - points(a)
        assert (c[1] > c[0]).all() and (c[0][1:] > c[1][:-1]).all()
        general = iv.union(np.concatenate(([iv.NEG], pairs[1])), np.concatenate((pairs[0], [iv.POS])))
        assert [x.tolist() for x in iv.complement(pairs)] == [x.tolist() for x in general]
        t = rng.integers(-5, 65, 7)
        assert iv.covered_before(a, t).tolist() == [len({p for p in points(a) if p < x}) for x in t]
        lo = rng.integers(-5, 65, 5)
        hi = lo + rng.integers(-3, 30, 5)
        want = [len({p for p in points(a) if x <= p < y}) for x, y in zip(lo, hi)]
        assert iv.length_within(a, lo, hi).tolist() == want
        assert iv.length_within(a, 0, hi).tolist() == [len({p for p in points(a) if 0 <= p < y}) for y in hi]
