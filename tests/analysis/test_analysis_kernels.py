"""The compiled analysis kernels (analysis/native/analysis_kernels.cpp) give exactly what
the numpy code they replace gives: hand-written edge cases and seeded random inputs. Each
operation is run twice through the one public function, COMMTRACE_NATIVE=0 (numpy) and
=1 (the kernels); skipped where the kernels are not built (``make setup`` builds them)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from commtrace import native
from commtrace.analysis import intervals as iv
from commtrace.analysis import native_ext


def _kernels_built() -> bool:
    saved = os.environ.pop("COMMTRACE_NATIVE", None)
    try:
        return native_ext.kernels() is not None
    finally:
        if saved is not None:
            os.environ["COMMTRACE_NATIVE"] = saved


pytestmark = pytest.mark.skipif(not _kernels_built(), reason="analysis kernels not built (commtrace build-native): "
                                f"{native.error(native_ext.EXTENSION)}")

NEG, POS = iv.NEG, iv.POS


def both(monkeypatch, fn, *args):
    """fn(*args) with the numpy code and with the kernels, as lists (arrays or tuples of them)."""
    out = []
    for mode in ("0", "1"):
        monkeypatch.setenv("COMMTRACE_NATIVE", mode)
        assert (native_ext.kernels() is None) == (mode == "0")
        r = fn(*args)
        out.append([x.tolist() for x in r] if isinstance(r, tuple) else r.tolist())
    return out


def same(monkeypatch, fn, *args):
    numpy_result, native_result = both(monkeypatch, fn, *args)
    assert native_result == numpy_result, (fn.__name__, args)
    return native_result


def raw(*pairs):
    return (np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64))


# interval lists as written, not sets: empty, touching, nested, unsorted, duplicates, sentinels
LISTS = {
    "empty": raw(),
    "one": raw((3, 7)),
    "zero length": raw((5, 5), (9, 8)),
    "touching": raw((0, 4), (4, 9), (9, 10)),
    "nested": raw((0, 100), (10, 20), (30, 40), (99, 100)),
    "unsorted": raw((50, 60), (0, 10), (20, 30), (5, 25)),
    "duplicates": raw((1, 5), (1, 5), (1, 3), (7, 9), (7, 9)),
    "equal starts": raw((2, 3), (2, 9), (2, 4)),
    "sentinels": raw((NEG, -5), (-3, 4), (10, POS)),
    "negative": raw((-40, -30), (-35, -10), (-5, 0)),
}


@pytest.mark.parametrize("name", sorted(LISTS))
def test_union_hand_cases(monkeypatch, name):
    same(monkeypatch, iv.union, *LISTS[name])


def test_union_hand_computed(monkeypatch):
    assert same(monkeypatch, iv.union, *LISTS["touching"]) == [[0], [10]]
    assert same(monkeypatch, iv.union, *LISTS["unsorted"]) == [[0, 50], [30, 60]]
    assert same(monkeypatch, iv.union, *LISTS["zero length"]) == [[], []]
    assert same(monkeypatch, iv.union, *LISTS["sentinels"]) == [[NEG, -3, 10], [-5, 4, POS]]


@pytest.mark.parametrize("a", sorted(LISTS))
def test_set_operations_hand_cases(monkeypatch, a):
    """Every pair of the hand-written lists, made sets: intersect, subtract, union_of."""
    for b in sorted(LISTS):
        sa, sb = iv.union(*LISTS[a]), iv.union(*LISTS[b])
        i = same(monkeypatch, iv.intersect, sa, sb)
        d = same(monkeypatch, iv.subtract, sa, sb)
        u = same(monkeypatch, iv.union_of, sa, sb)
        length = lambda x: sum(e - s for s, e in zip(*x))       # noqa: E731
        assert length(i) + length(d) == iv.length(sa)
        assert length(u) == iv.length(sa) + iv.length(sb) - length(i)
        # lists that are not sets, each in start order (ops are): union_of merges them
        same(monkeypatch, iv.union_of, _by_start(LISTS[a]), _by_start(LISTS[b]))
        same(monkeypatch, iv.union_of, LISTS[a], LISTS[b])          # any order: sorted first


def _by_start(pairs):
    order = np.argsort(pairs[0], kind="stable")
    return pairs[0][order], pairs[1][order]


def test_subtract_and_intersect_hand_computed(monkeypatch):
    a = iv.union(*raw((0, 10), (20, 30)))
    b = iv.union(*raw((2, 6), (8, 22), (25, 40)))
    assert same(monkeypatch, iv.intersect, a, b) == [[2, 8, 20, 25], [6, 10, 22, 30]]
    assert same(monkeypatch, iv.subtract, a, b) == [[0, 6, 22], [2, 8, 25]]
    everything = raw((NEG, POS))
    assert same(monkeypatch, iv.subtract, a, everything) == [[], []]
    assert same(monkeypatch, iv.subtract, everything, a) == [[NEG, 10, 30], [0, 20, POS]]
    assert same(monkeypatch, iv.intersect, everything, a) == [[0, 20], [10, 30]]


@pytest.mark.parametrize("name", sorted(LISTS))
def test_lengths_hand_cases(monkeypatch, name):
    s = iv.union(*LISTS[name])
    t = np.array([NEG, -50, -5, 0, 3, 4, 5, 9, 10, 50, 99, 100, 101, POS], np.int64)
    same(monkeypatch, iv.covered_before, s, t)
    same(monkeypatch, iv.covered_before, s, t[::-1].copy())           # times falling back
    lo = np.array([0, 4, 25, 10, 35, NEG, 7, 3], np.int64)
    hi = np.array([100, 9, 28, 20, 50, POS, 2, 3], np.int64)           # hi < lo and hi == lo: empty windows
    same(monkeypatch, iv.length_within, s, lo, hi)
    same(monkeypatch, iv.length_within, s, 0, hi)                    # broadcast
    same(monkeypatch, iv.length_within, s, lo.reshape(2, 4), hi.reshape(2, 4))


def test_lengths_hand_computed(monkeypatch):
    a = iv.union(*raw((0, 10), (20, 30)))
    assert same(monkeypatch, iv.length_within, a, [0, 4, 25, 10, 35, 30], [100, 9, 28, 20, 50, 20]) == \
        [20, 5, 3, 0, 0, 0]
    assert same(monkeypatch, iv.covered_before, a, np.array([25, -5, 5, 15, 99])) == [15, 0, 5, 10, 20]


def _random_list(rng, n, span, max_len):
    s = rng.integers(-span, span, n)
    return s, s + rng.integers(-2, max_len, n)           # some empty or negative-length


@pytest.mark.parametrize("seed", range(6))
def test_random_against_numpy(monkeypatch, seed):
    """Seeded random lists from tiny to 20,000 intervals, dense (much overlap) and sparse."""
    rng = np.random.default_rng(seed)
    for n, span, max_len in ((0, 10, 3), (1, 10, 3), (7, 20, 6), (50, 100, 30), (2000, 10**6, 300),
                             (20000, 10**5, 40), (20000, 10**9, 10**4)):
        a_raw, b_raw = _random_list(rng, n, span, max_len), _random_list(rng, n // 2 + 1, span, max_len)
        a = same(monkeypatch, iv.union, *a_raw)
        a = tuple(np.array(x, np.int64) for x in a)
        b = iv.union(*b_raw)
        ordered = _by_start(a_raw)
        same(monkeypatch, iv.union, *ordered)
        same(monkeypatch, iv.union_of, ordered, _by_start(b_raw))
        same(monkeypatch, iv.union_of, a_raw, b_raw)
        same(monkeypatch, iv.intersect, a, b)
        same(monkeypatch, iv.subtract, a, b)
        same(monkeypatch, iv.subtract, b, a)
        t = rng.integers(-span - 5, span + max_len + 5, 300)
        same(monkeypatch, iv.covered_before, a, t)
        same(monkeypatch, iv.covered_before, a, np.sort(t))
        lo = np.sort(rng.integers(-span, span, 300))
        hi = lo + rng.integers(-10, max(span // 10, 20), 300)
        same(monkeypatch, iv.length_within, a, lo, hi)
        same(monkeypatch, iv.length_within, a, rng.permutation(lo), hi)


def test_kernels_reject_what_they_cannot_read(monkeypatch):
    monkeypatch.setenv("COMMTRACE_NATIVE", "1")     # built (the module's skip), also when the run says 0
    k = native_ext.kernels()
    out = np.empty(4, np.int64)
    with pytest.raises(TypeError, match="int64"):
        k.union(np.zeros(2, np.float64), np.zeros(2, np.float64), out, out)
    with pytest.raises(ValueError, match="differ in length"):
        k.union(np.zeros(2, np.int64), np.zeros(3, np.int64), out, out)
    with pytest.raises(ValueError, match="too small"):
        k.intersect(*raw((0, 1), (2, 3), (4, 5)), *raw((0, 1), (2, 3)), out, out)


def test_loading_the_kernels_imports_no_torch():
    """An analysis never imports torch (~1 s per process and per pool worker)."""
    code = ("import sys; from commtrace.analysis import intervals as iv, native_ext; "
            "assert native_ext.kernels() is not None; assert iv.length(iv.union([0, 5], [3, 9])) == 7; "
            "print('torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "COMMTRACE_NATIVE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_searchsorted_hand_cases(monkeypatch):
    a = np.array([NEG, -3, 0, 0, 0, 4, 9, 9, POS], np.int64)
    v = np.array([NEG, -5, 0, 0, 1, 9, 3, 0, 10, POS, -4, POS], np.int64)     # growing, equal, falling back
    for side in ("left", "right"):
        assert same(monkeypatch, iv.searchsorted, a, v, side) == np.searchsorted(a, v, side=side).tolist()
        assert same(monkeypatch, iv.searchsorted, np.empty(0, np.int64), v, side) == [0] * len(v)
        assert same(monkeypatch, iv.searchsorted, a, np.empty(0, np.int64), side) == []
    assert same(monkeypatch, iv.searchsorted, a, v[:6], "right") == [1, 1, 5, 5, 5, 8]


@pytest.mark.parametrize("seed", range(3))
def test_searchsorted_random(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    for n, m in ((1, 5), (50, 7), (20000, 78000), (78000, 20000), (1000, 1000)):
        a = np.sort(rng.integers(-500, 500, n) * rng.integers(1, 4))
        for v in (np.sort(rng.integers(-600, 600, m)), rng.integers(-600, 600, m)):
            for side in ("left", "right"):
                same(monkeypatch, iv.searchsorted, a, v, side)


def test_locate_ops_hand_cases(monkeypatch):
    """steps.locate_ops: two ranks' steps (touching, one op exactly on a begin / an end),
    ops before, between, inside, after, a rank without steps; rows of both ranks interleaved."""
    import pandas as pd

    from commtrace.analysis.arrays import OpArrays
    from commtrace.analysis.steps import AFTER, BEFORE, BETWEEN, IN_STEP, NO_STEPS, locate_ops

    steps = pd.DataFrame({"rank": [0, 0, 0, 1], "step": [1, 2, 3, 7], "t_begin_ns": [10, 20, 30, 0],
                          "t_end_ns": [20, 25, 40, 5]})
    start = np.array([NEG, 5, 10, 15, 20, 22, 25, 26, 29, 30, 40, 41, POS, 3, 5, 6, 1], np.int64)
    rank = np.array([0] * 13 + [1, 1, 1, 2], np.int32)
    a = OpArrays(rank=rank, start=start, end=start, dur=np.zeros(17), nbytes=np.zeros(17, np.int64))
    step, where = same(monkeypatch, locate_ops, a, steps)
    assert step == [0, 0, 1, 1, 2, 2, 2, 0, 0, 3, 3, 0, 0, 7, 7, 0, 0]
    assert where == [BEFORE, BEFORE, IN_STEP, IN_STEP, IN_STEP, IN_STEP, IN_STEP, BETWEEN, BETWEEN, IN_STEP,
                     IN_STEP, AFTER, AFTER, IN_STEP, IN_STEP, AFTER, NO_STEPS]
    order = np.random.default_rng(0).permutation(17)       # rows in any order: per-rank rows scattered
    shuffled = OpArrays(rank=rank[order], start=start[order], end=start[order], dur=np.zeros(17),
                        nbytes=np.zeros(17, np.int64))
    same(monkeypatch, locate_ops, shuffled, steps)
    one = OpArrays(rank=rank[:13], start=start[:13], end=start[:13], dur=np.zeros(13), nbytes=np.zeros(13, np.int64))
    assert same(monkeypatch, locate_ops, one, steps)[0] == step[:13]      # one rank's frame: no gather
    rng = np.random.default_rng(3)         # several of the numpy code's chunks, ops before / after every step
    begin = np.sort(rng.choice(10**7, 2000, replace=False)) * 10
    steps = pd.DataFrame({"rank": 0, "step": np.arange(1, 2001), "t_begin_ns": begin,
                          "t_end_ns": begin + rng.integers(0, 12, 2000)})
    start = np.sort(rng.integers(-10**6, 10**8 + 10**6, 200_001))
    big = OpArrays(rank=np.broadcast_to(np.int32(0), len(start)), start=start, end=start, dur=np.zeros(len(start)),
                   nbytes=np.zeros(len(start), np.int64))
    step, where = same(monkeypatch, locate_ops, big, steps)
    assert {BEFORE, BETWEEN, IN_STEP, AFTER} <= set(where) and max(step) > 1900


def test_last_in_window(monkeypatch):
    """step_table._last_in_window (the DDP gradient tails): per backward pass the last bucket
    launched inside it; launches outside every pass, on a boundary, unsorted, repeated."""
    from commtrace.analysis.step_table import _last_in_window

    b = np.array([0, 10, 20, 30], np.int64)
    e = np.array([5, 15, 25, 30], np.int64)
    t = np.array([-1, 3, 1, 5, 6, 12, 11, 25, 25, 30, 31, NEG, POS], np.int64)
    low = np.iinfo(np.int64).min
    assert same(monkeypatch, _last_in_window, b, e, t) == [5, 12, 25, 30]
    assert same(monkeypatch, _last_in_window, b, e, t[:2]) == [3, low, low, low]
    assert same(monkeypatch, _last_in_window, b, e, t[:1]) == [low, low, low, low]
    rng = np.random.default_rng(4)
    for n, m in ((1, 3), (30, 200), (20000, 78000)):
        b = np.sort(rng.integers(0, 10**6, n))
        e = b + rng.integers(0, 10**6 // max(n, 1), n)
        same(monkeypatch, _last_in_window, b, e, np.sort(rng.integers(-10, 10**6 + 10, m)))
        same(monkeypatch, _last_in_window, b, e, rng.integers(-10, 10**6 + 10, m))


def test_add_by_row(monkeypatch):
    """step_table._add_by_row (ops and bytes per step row): ops whose step has no row are not
    counted; sums add up in float64 as np.bincount does; both accumulate into what is there."""
    from commtrace.analysis.step_table import _add_by_row

    def run(row_of, st, w, n):
        counts, sums = np.ones(n, np.int64), np.full(n, 0.5)
        _add_by_row(row_of, st, w, counts, sums)
        return counts, sums

    row_of = np.array([-1, 2, 0, -1, 1], np.int64)
    st = np.array([0, 1, 1, 2, 3, 4, 4, 4], np.int32)
    w = np.array([7, 1, 2, 4, 8, 16, 32, 2**60], np.int64)
    counts, sums = same(monkeypatch, run, row_of, st, w, 3)
    assert counts == [2, 4, 3] and sums == [4.5, 48.5 + 2**60, 3.5]
    rng = np.random.default_rng(5)
    row_of = np.where(rng.random(500) < 0.2, -1, rng.permutation(500)).astype(np.int64)
    same(monkeypatch, run, row_of, rng.integers(0, 500, 100000).astype(np.int32),
         rng.integers(0, 2**40, 100000), 500)


def test_per_instance_extremes(monkeypatch):
    """partition_map._per_instance: first caller (earliest start, then lowest rank; the later
    row of exact ties), last caller (latest start, then highest rank), slowest duration
    ignoring NaN (all NaN: NaN), largest size, latest end; instances in any row order."""
    from commtrace.analysis.partitioned.partition_map import _per_instance

    inst = np.array([0, 1, 0, 0, 2, 1, 0, 2], np.int64)
    c = {"t": np.array([5, 9, 3, 3, 7, 9, 8, 7], np.int64), "rank": np.array([2, 0, 4, 1, 3, 1, 0, 3], np.int64),
         "dur": np.array([1.5, np.nan, 4.0, np.nan, np.nan, 2.0, 0.5, np.nan]),
         "size": np.array([8, 16, 4, 8, 0, 32, 8, 1], np.int64), "end": np.array([10, 20, 9, 30, NEG, 12, 9, 8], np.int64)}
    for first, last, slowest, size, end in both(monkeypatch, _per_instance, inst, 3, c):
        assert first == [3, 1, 7] and last == [6, 5, 7]       # instance 2: two identical rows, the later one
        assert slowest[:2] == [4.0, 2.0] and np.isnan(slowest[2])
        assert size == [8, 32, 1] and end == [30, 20, 8]
    rng = np.random.default_rng(6)
    n, k = 50000, 3000
    inst = np.concatenate((np.arange(k), rng.integers(0, k, n - k)))
    c = {"t": rng.integers(0, 1000, n), "rank": rng.integers(0, 8, n),
         "dur": np.where(rng.random(n) < 0.3, np.nan, rng.random(n) * 100), "size": rng.integers(0, 1 << 40, n),
         "end": rng.integers(-(1 << 50), 1 << 50, n)}
    numpy_result, native_result = both(monkeypatch, _per_instance, inst, k, c)
    assert np.array_equal(np.array(numpy_result[2]), np.array(native_result[2]), equal_nan=True)
    assert [x for i, x in enumerate(native_result) if i != 2] == [x for i, x in enumerate(numpy_result) if i != 2]


def test_first_seen_codes(monkeypatch):
    """partition_map._first_seen_codes: pd.factorize's codes (numbered by first appearance)."""
    import pandas as pd

    from commtrace.analysis.partitioned.partition_map import _first_seen_codes

    keys = np.array([7, 3, 7, -2, 3, 100, -2, 7], np.int64)
    assert same(monkeypatch, _first_seen_codes, keys) == [0, 1, 0, 2, 1, 3, 2, 0]
    rng = np.random.default_rng(7)
    for n, span in ((1, 1), (1000, 50), (100000, 4000), (3000, 10**7)):    # the last: beyond the table's range
        keys = rng.integers(-span, span, n)
        assert same(monkeypatch, _first_seen_codes, keys) == pd.factorize(keys)[0].tolist()


def test_cell_figures(monkeypatch):
    """rank_map.cell_figures: per cell ops, summed known durations, known count, bytes; the
    known durations cell by cell in row order; whether float32 holds them exactly."""
    from commtrace.analysis.partitioned.rank_map import cell_figures

    def figures(cell, dur, nbytes, n):
        f = cell_figures(cell, dur, nbytes, n)
        return f.ops, f.dur, f.known, f.nbytes, f.values, f.bounds, f.exact32

    cell = np.array([2, 0, 2, 2, 0, 3], np.int64)
    dur = np.array([1.5, np.nan, 0.1, 4.0, 2.0, np.nan])
    nbytes = np.array([8, 1, 2**60, 0, 3, 5], np.int64)
    for ops, d, known, nb, values, bounds, exact32 in both(monkeypatch, figures, cell, dur, nbytes, 4):
        assert ops == [2, 0, 3, 1] and d == [2.0, 0.0, 5.6, 0.0] and known == [1, 0, 3, 0]
        assert nb == [4, 0, float(2**60), 5]                      # float64, as np.bincount: the 8 is lost
        assert values == [2.0, 1.5, 0.1, 4.0] and bounds == [0, 1, 1, 4, 4]
        assert exact32 == [True, True, False, True]              # 0.1 is not a float32; empty cells are
    rng = np.random.default_rng(8)
    for n_cells, n in ((1, 0), (5, 100000), (40000, 100000)):
        cell = rng.integers(0, n_cells, n)
        dur = np.where(rng.random(n) < 0.2, np.nan, np.round(rng.random(n) * 1e6))
        dur[::7] = rng.random(len(dur[::7]))
        same(monkeypatch, figures, cell, dur, rng.integers(0, 1 << 40, n), n_cells)
    # a rank task's narrow columns (int16 cells, int32 bytes) are read as held: the same figures as int64 ones
    kern = native_ext.kernels()
    cell, nb = rng.integers(0, 300, 50000), rng.integers(0, 1 << 31, 50000)
    dur = np.where(rng.random(50000) < 0.1, np.nan, rng.random(50000) * 1e4)
    wide = figures(cell, dur, nb, 300)
    for ct, bt in ((np.int8, np.int32), (np.int16, np.int32), (np.int32, np.int64), (np.int16, np.int16)):
        c = cell % 100 if ct == np.int8 else cell
        b = nb % 30000 if bt == np.int16 else nb
        ref = figures(c, dur, b, 300)
        out = [np.zeros(300) for _ in range(4)] + [np.empty(301, np.int64), np.empty(50000), np.empty(300, np.int8)]
        kern.cell_figures(c.astype(ct), dur, b.astype(bt), *out)       # no int64 copy made for the kernel
        got = out[:4] + [out[5][:out[4][-1]], out[4], out[6].astype(bool)]
        assert all(np.array_equal(x, y) for x, y in zip(got, ref)), (ct, bt)
        assert all(np.array_equal(x, y) for x, y in zip(figures(c.astype(ct), dur, b.astype(bt), 300), ref))
    assert all(np.array_equal(x, y) for x, y in zip(figures(cell.astype(np.int16), dur, nb.astype(np.int32), 300), wide))
    with pytest.raises(TypeError):
        kern.cell_figures(cell.astype(np.float64), dur, nb, *out)


def test_file_columns(monkeypatch):
    """partition_map._file_columns: one file's records as rows of the partition's columns
    (end from a known end, else the return, never before the start; NaN durations; p2p
    src/dst from the sig's root), written at an offset; random records with NaN offsets."""
    from commtrace.analysis.partitioned.partition_map import _COLUMNS, _FileTables, _file_columns
    from commtrace.trace import schema

    rng = np.random.default_rng(9)
    m, ns, ng = 5000, 7, 3
    rec = np.zeros(m, schema.OP_RECORD)
    rec["sig"], rec["group"], rec["seq"] = rng.integers(0, ns, m), rng.integers(0, ng, m), rng.integers(1, 2**32, m)
    rec["d_end"] = np.where(rng.random(m) < 0.3, np.nan, rng.random(m) * 1e6).astype(np.float32)
    rec["d_return"] = np.where(rng.random(m) < 0.3, np.nan, rng.random(m) * 1e6 - 1e3).astype(np.float32)
    rec["d_end"][:3] = [np.nan, 5.0, -7.0]            # unknown end; a known one; one before the start
    rec["d_return"][:3] = [np.nan, 9.0, np.nan]
    t = rng.integers(10**9, 10**12, m)
    t[:3] = 1000
    p2p = np.array([False, True, True, False, False, True, False])
    ft = _FileTables(np.arange(ns), np.arange(ng), np.arange(ns), np.arange(ng), ["x"] * ns, p2p,
                     np.array([False, True, False, False, False, False, False]), rng.integers(-1, 8, ns),
                     rng.integers(0, 1 << 40, ns), [("w", str(g)) for g in range(ng)], rng.integers(1, 64, ng),
                     [()] * (ns * ng))
    si, gi = rec["sig"].astype(np.int64), rec["group"].astype(np.int64)
    s_op, g_wg, c_lut = rng.integers(0, 9, ns), rng.integers(0, 4, ng), rng.integers(0, 30, ns * ng)

    def columns():
        c = {k: np.full(m + 10, -99, dt) for k, dt in _COLUMNS.items()}
        _file_columns(c, 10, rec, t, si, gi, ft, s_op, g_wg, c_lut, 3)
        return tuple(c.values())

    numpy_result, native_result = both(monkeypatch, columns)
    for name, x, y in zip(_COLUMNS, numpy_result, native_result):
        assert np.array_equal(np.array(x), np.array(y), equal_nan=True), name
    c = dict(zip(_COLUMNS, native_result))
    assert c["t"][:10] == [-99] * 10 and c["t"][10:13] == [1000] * 3
    assert c["end"][10:13] == [1000, 1005, 1000] and np.isnan(c["dur"][10]) and c["dur"][11:13] == [5.0, -7.0]
    sent = 10 + int(np.flatnonzero(rec["sig"] == 1)[0])
    received = 10 + int(np.flatnonzero(rec["sig"] == 2)[0])
    assert (c["src"][sent], c["dst"][sent]) == (3, ft.root[1]) and (c["src"][received], c["dst"][received]) == (ft.root[2], 3)


def test_op_times(monkeypatch):
    """arrays.op_times: return (start when unknown), end (known end, else return, else
    start; never before the start), duration (NaN when the end is unknown)."""
    from commtrace.analysis.arrays import op_times

    t = np.array([100, 100, 100, 100, 100], np.int64)
    d_return = np.array([np.nan, 5.0, 7.0, np.nan, -50.0], np.float32)
    d_end = np.array([np.nan, np.nan, 20.5, 9.0, -80.0], np.float32)
    for ret, unknown, end, dur in both(monkeypatch, op_times, d_return, d_end, t):
        assert ret == [100, 105, 107, 100, 50] and unknown == [True, False, False, True, False]
        assert end == [100, 105, 120, 109, 100]
        assert np.isnan(dur[0]) and np.isnan(dur[1]) and dur[2:] == [20.0, 9.0, -80.0]
    rng = np.random.default_rng(10)
    n = 100000
    t = rng.integers(0, 10**15, n)
    d_return = np.where(rng.random(n) < 0.3, np.nan, rng.normal(1e5, 1e5, n)).astype(np.float32)
    d_end = np.where(rng.random(n) < 0.3, np.nan, rng.normal(1e6, 1e6, n)).astype(np.float32)
    numpy_result, native_result = both(monkeypatch, op_times, d_return, d_end, t)
    for x, y in zip(numpy_result, native_result):
        assert np.array_equal(np.array(x), np.array(y), equal_nan=True)


def test_step_bounds_by_hand(monkeypatch):
    from commtrace.analysis.steps import BACKWARD, OPTIMIZER, TRAINING_FORWARD, step_bounds
    F, B, O = TRAINING_FORWARD, BACKWARD, OPTIMIZER
    # key 7: forward 100-110, two backwards (120-130, 135-140), optimizer 150-160 and 158-170;
    # key 3: optimizer only 10-20; key 9: a backward without an optimizer (no step); key 5:
    # kind 0 (an untrained forward), ignored.
    key = np.array([7, 7, 7, 7, 7, 3, 9, 5], np.int64)
    kind = np.array([F, B, B, O, O, O, B, 0], np.int8)
    b = np.array([100, 120, 135, 150, 158, 10, 1, 0], np.int64)
    e = np.array([110, 130, 140, 160, 170, 20, 2, 5], np.int64)
    got = same(monkeypatch, step_bounds, key, kind, b, e)
    assert got == [[3, 7], [10, 100], [20, 170], [0, 2]]


def test_step_bounds_random(monkeypatch):
    from commtrace.analysis.steps import step_bounds
    rng = np.random.default_rng(7)
    for n, keys in ((1, 3), (50, 10), (5000, 700), (3000, 3 * 10**9)):
        key = rng.integers(0, keys, n).astype(np.int64)
        kind = rng.integers(0, 4, n).astype(np.int8)
        kind[0] = 1
        b = rng.integers(-10**12, 10**12, n).astype(np.int64)
        e = b + rng.integers(0, 10**6, n)
        same(monkeypatch, step_bounds, key, kind, b, e)


def test_order_statistics(monkeypatch):
    """merge.order_statistics: np.partition(np.concatenate(pieces), ks)[ks] without the
    concatenation (radix selection); merge._median: np.median of an integer column."""
    from commtrace.analysis.partitioned import merge
    from commtrace.analysis.partitioned.merge import order_statistics

    def median(v):
        return np.array(merge._median(v))

    pieces = [np.array([5, -3, 9], np.int64), np.array([], np.int64), np.array([0, 9, -7, 2], np.int64)]
    # sorted: -7 -3 0 2 5 9 9 -> ranks 0, 3, 6
    assert same(monkeypatch, order_statistics, pieces, np.array([0, 3, 6])) == [-7, 2, 9]
    assert both(monkeypatch, median, np.array([4, 1, 3, 10], np.int64)) == [3.5, 3.5]     # (3 + 4) / 2
    rng = np.random.default_rng(9)
    cases = [[rng.integers(-2**62, 2**62, n) for n in (1000, 0, 4000)],                        # the whole range
             [rng.integers(0, 3, n).astype(np.int32) for n in (50000, 7)],                      # ties: one bucket
             [np.round(rng.exponential(1e6, n)).astype(np.float32) for n in (30000, 20000)],    # durations
             [rng.exponential(1e6, 40000)],                                                     # float64 bits
             [rng.normal(0, 1e3, 5000).astype(np.float32)]]                                     # sign bits: numpy
    for ps in cases:
        n = sum(len(p) for p in ps)
        ks = np.unique(np.concatenate(([0, n - 1, n // 2], rng.integers(0, n, 3))))
        want = np.partition(np.concatenate(ps), ks)[ks]
        assert same(monkeypatch, order_statistics, ps, ks) == want.tolist()
    for v in (np.array([7]), rng.integers(-10**15, 10**15, 20001), rng.integers(0, 5, 19608)):
        assert both(monkeypatch, median, v) == [float(np.median(v))] * 2
    k = native_ext.kernels()
    with pytest.raises(TypeError, match="all alike"):
        k.order_stats([np.zeros(2, np.int64), np.zeros(2, np.int32)], np.array([0]), np.empty(1, np.int64), False)
    with pytest.raises(ValueError, match="beyond the values"):
        k.order_stats([np.zeros(2, np.int64)], np.array([2]), np.empty(1, np.int64), False)
