"""Bounded traces (``commtrace run --keep-last N`` / ``--steps A:B``) in the partitioned analysis.

A ring keeps a bounded process's records in two segments (``<stem>.ops.bin.1``, ``<stem>.ops.bin``)
and the reader keeps the last N ops by call time, wherever they lie (``trace.coverage``): a partition
task takes its records as the reader gives them and keeps its chunk. A bounded file holds at most
2N records and a ring's seqs cover few chunks, so reading it whole per partition stays cheap."""
from __future__ import annotations

import os

from ...trace import reader, schema


def is_bounded(pt) -> bool:
    return reader.bounded.options(pt.header) is not None


def ops_records_on_disk(ops_path: str) -> int:
    """Op records in an ops file and its previous ring segment, if any (from their sizes)."""
    n = 0
    for p in reader.bounded.segment_paths(ops_path):
        try:
            n += os.path.getsize(p) // schema.RECORD_SIZE
        except OSError:
            pass
    return n
