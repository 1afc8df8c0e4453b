"""records.member: isin for record id fields, by a bool table where the keys are small."""
import numpy as np

from commtrace.trace import records, schema


def test_small_keys_use_the_table_and_equal_isin():
    ids = np.array([0, 1, 5, 7, 2**32 - 1, 5, 2], dtype=np.uint32)
    keys = np.array([1, 5], dtype=np.int64)
    assert records.member(ids, keys).tolist() == [False, True, True, False, False, True, False]


def test_huge_keys_and_signed_ids_take_the_sorted_lookup():
    ids = np.array([3, 1 << 20, 7], dtype=np.uint32)
    assert records.member(ids, np.array([1 << 20, 7], dtype=np.int64)).tolist() == [False, True, True]
    signed = np.array([-1, 3, 4], dtype=np.int64)
    assert records.member(signed, np.array([3], dtype=np.int64)).tolist() == [False, True, False]


def test_no_keys_and_statuses():
    assert records.member(np.array([0, 1], dtype=np.uint16), np.empty(0, np.int64)).tolist() == [False, False]
    status = np.array([0, 1, 2, 3, 255], dtype=np.uint8)
    assert records.member(status, records.STATUS_CODES).tolist() == [True, True, True, False, False]
    assert sorted(records.STATUS_CODES.tolist()) == sorted(schema.STATUS_NAMES)


def test_random_ids_equal_isin():
    rng = np.random.default_rng(0)
    for top in (1, 100, (1 << 16) - 1, 1 << 16, 1 << 24):
        keys = np.unique(rng.integers(0, top + 1, 50)).astype(np.int64)
        ids = rng.integers(0, min(2 * top + 2, 2**32 - 1), 10_000).astype(np.uint32)
        assert (records.member(ids, keys) == np.isin(ids.astype(np.int64), keys)).all()
