"""One process's op records as every reader takes them (the frame builder and each map
task of the partitioned analysis): read, checked, de-duplicated, timed on rank 0's
clock, each rule written once. ``pt`` is a ``reader.ProcessTrace``.
"""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from . import schema
from .clocks import fit as fit_clock

STATUS_CODES = np.array(sorted(schema.STATUS_NAMES), dtype=np.int64)

_TABLE_IDS = 1 << 16   # largest key looked up through a bool table (64 KiB); beyond, a sorted lookup


def read_slice(ops_path: str, first: int, count: int) -> np.ndarray:
    """Records ``first`` .. ``first + count - 1`` of an ops file, as written (fewer at its end)."""
    return np.fromfile(ops_path, dtype=schema.OP_RECORD, count=count, offset=first * schema.RECORD_SIZE)


def read_pieces(ops_path: str, count: int, piece: int):
    """(first, records) of the file's first ``count`` records, ``piece`` records at a time (read_slice)."""
    return ((lo, read_slice(ops_path, lo, min(piece, count - lo))) for lo in range(0, count, piece))


def defined_ids(table: dict) -> np.ndarray:
    """The ids of ``table`` (sigs or groups of a meta file) a record field can name."""
    return np.array([k for k in table if 0 <= k < 2**32], dtype=np.int64)


def member(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.isin(ids, keys)`` for records' unsigned id fields. Untrusted keys may be huge: a
    table indexed by id only when the largest is small, as commtrace writes them (one gather
    instead of isin's work: 1-2 % less CPU for the partitioned report, measured)."""
    top = int(keys.max()) if len(keys) else -1
    if top >= _TABLE_IDS or ids.dtype.kind != "u":
        return np.isin(ids.astype(np.int64), keys)
    table = np.zeros(top + 2, dtype=bool)    # the last entry stands for every id above top (clipped to it)
    table[keys] = True
    return table.take(ids, mode="clip")


def defined(rec: np.ndarray, sig_ids: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """Which records name a sig and a group their meta file defines (``defined_ids``)."""
    return member(rec["sig"], sig_ids) & member(rec["group"], group_ids)


def sane(rec: np.ndarray) -> np.ndarray:
    """Which records hold nothing no writer produces: an unknown status, seq 0, t_call <= 0."""
    return member(rec["status"], STATUS_CODES) & (rec["seq"] > 0) & (rec["t_call"] > 0)


def valid(rec: np.ndarray, sig_ids: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """The records a reader takes: defined and sane."""
    return defined(rec, sig_ids, group_ids) & sane(rec)


def last_record_per_op(rec: np.ndarray) -> np.ndarray:
    """An op written IN_FLIGHT and again when it finished keeps its final record (file order); so
    does a p2p op written completed and again failed (its Work said it completed, then its wait raised)."""
    if len(rec) == 0 or not (rec["status"] != schema.STATUS_COMPLETED).any():
        return rec
    keys = pd.DataFrame({"t": rec["t_call"], "g": rec["group"], "s": rec["seq"], "i": rec["sig"]})
    keep = ~keys.duplicated(keep="last").to_numpy()
    return rec[keep]


def clock_offset(pt, ref):
    """This process's monotonic ns -> offset ns to rank 0's clock (``ref``: its world's rank-0
    process, None when unknown)."""
    return fit_clock(pt, ref, pt.world_id).offset


def aligned(times, offset) -> np.ndarray:
    """Monotonic ns of one process -> int64 ns on rank 0's clock (``offset``: ``clock_offset``)."""
    t = np.asarray(times, dtype=np.int64)
    return t + offset(t).astype(np.int64) if len(t) else t


def aligner(pt, ref):
    """A function: call times (monotonic ns, this process) -> int64 times on rank 0's clock."""
    return functools.partial(aligned, offset=clock_offset(pt, ref))


def call_times(pt, ref, rec: np.ndarray) -> np.ndarray:
    """Records ``rec`` of process ``pt``: their call times on rank 0's clock (int64 ns)."""
    return aligned(rec["t_call"], clock_offset(pt, ref))
