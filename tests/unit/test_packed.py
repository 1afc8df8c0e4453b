"""analysis.partitioned.packed: lossless packing of integer columns for the trip from a worker."""
import pickle

import numpy as np
import pytest

from commtrace.analysis.partitioned.packed import pack, pack_column


def roundtrip(v):
    c = pickle.loads(pickle.dumps(pack_column(v)))
    out = c.unpack()
    assert out.dtype == v.dtype and np.array_equal(out, v)
    return c


def test_equal_values_travel_as_one_number():
    c = roundtrip(np.full(1000, 7, np.int32))
    assert (c.kind, c.first, c.step, c.data) == ("ramp", 7, 0, None)


def test_step_numbers_travel_as_first_and_step():
    c = roundtrip(np.arange(5, 20005, dtype=np.int32))
    assert (c.kind, c.first, c.step) == ("ramp", 5, 1)


def test_times_travel_as_narrow_differences():
    t = np.array([10**18, 10**18 + 300, 10**18 + 250, 10**18 + 70_000], np.int64)
    c = roundtrip(t)
    assert c.kind == "delta" and c.first == 10**18 and c.data.dtype == np.int32
    assert c.data.tolist() == [300, -50, 69_750]


def test_small_values_travel_in_the_smallest_type():
    c = roundtrip(np.array([3, 0, 120, 5], np.int64))
    assert c.kind == "plain" and c.data.dtype == np.int8
    c = roundtrip(np.array([-40_000, 7, 1], np.int64))
    assert c.kind == "plain" and c.data.dtype == np.int32


def test_extremes_do_not_overflow():
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    c = roundtrip(np.array([lo, hi, lo, 0], np.int64))      # differences would overflow: plain
    assert c.kind == "plain" and c.data.dtype == np.int64
    roundtrip(np.array([0, 4_000_000_000, 1], np.uint32))
    roundtrip(np.array([], np.int64))
    roundtrip(np.array([42], np.int16))


def test_columns_of_one_table():
    cols = {"rank": np.full(4, 3, np.int32), "step": np.arange(1, 5, dtype=np.int32),
            "bytes": np.array([0, 1 << 40, 5, 6], np.int64)}
    p = pickle.loads(pickle.dumps(pack(cols)))
    assert len(p) == 4
    back = p.unpack()
    assert list(back) == ["rank", "step", "bytes"]
    for k, v in cols.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)
    with pytest.raises(ValueError):
        pack({"a": np.zeros(2, np.int64), "b": np.zeros(3, np.int64)})
    with pytest.raises(TypeError):
        pack_column(np.zeros(2))


def test_random_columns_round_trip():
    rng = np.random.default_rng(0)
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32):
        info = np.iinfo(dt)
        for scale in (1, 100, info.max // 4):
            v = np.clip(np.cumsum(rng.integers(-scale, scale + 1, 500)), info.min, info.max).astype(dt)
            roundtrip(v)

