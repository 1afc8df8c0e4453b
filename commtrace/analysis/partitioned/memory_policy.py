"""How much memory an analysis may use, and whether a run's one frame fits in it: the
policy every command (report, compare, check) follows, defined once.

A run is analysed in one frame when its ops times the one-frame cost per op fit the
limit (default: ``DEFAULT_MEMORY_FRACTION`` of RAM), else by map/reduce over its files.
"""
from __future__ import annotations

import glob
import os

from ...errors import CommtraceError
from ...trace import schema
from .executors import total_memory

DEFAULT_MEMORY_FRACTION = 0.5
# Peak memory of the one-frame report per op (BENCHMARKS.md: 231 B/op measured), with headroom.
ONE_FRAME_BYTES_PER_OP = 300
# ... and of the one-frame check (364-416 B/op measured on synthetic runs): it holds more columns.
ONE_FRAME_CHECK_BYTES_PER_OP = 450


def default_memory_limit() -> int:
    return int(total_memory() * DEFAULT_MEMORY_FRACTION)


def memory_limit_of(text: str | None) -> int | None:
    """"8G", "512M", "25%" (of RAM), plain bytes -> bytes; None -> None (the default)."""
    if text is None:
        return None
    t = text.strip().upper().removesuffix("B")
    try:
        if t.endswith("%"):
            value = total_memory() * float(t[:-1]) / 100
        else:
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
            value = float(t[:-1] if t[-1:] in "KMGT" else t) * mult
    except ValueError:
        value = -1
    if not value > 0:
        raise CommtraceError(f"--memory-limit {text}: not a size (e.g. 8G, 512M, 25%)")
    return int(value)


def one_frame_fits(run_dir: str, memory_limit: int | None, bytes_per_op: int = ONE_FRAME_BYTES_PER_OP) -> bool:
    """Whether the one frame of ``run_dir`` (its op records at ``bytes_per_op``) fits
    ``memory_limit`` (None: the default). Unreadable sizes count as fitting (the one-frame
    reader then says what is wrong)."""
    limit = memory_limit or default_memory_limit()
    try:
        size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(glob.escape(run_dir), "*" + schema.OPS_SUFFIX)))
    except OSError:
        return True
    return size // schema.RECORD_SIZE * bytes_per_op <= limit
