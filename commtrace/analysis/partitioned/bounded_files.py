"""Bounded traces (``commtrace run --keep-last N`` / ``--steps A:B``) in the partitioned analysis.

A bounded process's records are not one file read in slices: a ring keeps them in
two segments (``<stem>.ops.bin.1``, ``<stem>.ops.bin``) and the reader keeps the
last N ops by call time, however they lie in the segments (``trace.coverage``).
So a partition task takes a bounded process's records as the reader gives them
(``reader.read_process``) and keeps its chunk; the rank task indexes which chunks
those records fall in. A bounded file holds at most 2N records by design, and a
ring's seqs cover few chunks, so reading it whole per partition stays cheap."""
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
