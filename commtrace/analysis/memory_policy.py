"""How much of the machine an analysis may hold, and whether a run fits in memory whole.

The one place that decides: a run for which ``needs_partitions`` is False is held whole (one
partition; the views that draw each op get one frame), else it is read file by file. The CLI passes
``--memory-limit`` (or None); the analyses size their tasks from ``memory_limit``.
"""
from __future__ import annotations

import glob
import os

from ..trace import schema

# The default memory limit: this share of the machine's RAM.
DEFAULT_MEMORY_FRACTION = 0.5
# Peak memory per op of a run held whole with its op view (the frame: 231-256 B/op measured), with headroom.
WHOLE_RUN_BYTES_PER_OP = 300


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


def default_memory_limit() -> int:
    return int(total_memory() * DEFAULT_MEMORY_FRACTION)


def memory_limit(limit: int | None) -> int:
    """The limit in bytes: ``limit`` if given, else the default."""
    return limit or default_memory_limit()


def needs_partitions(run_dir: str, limit: int | None = None, bytes_per_op: int = WHOLE_RUN_BYTES_PER_OP) -> bool:
    """Whether ``run_dir`` held whole (at ``bytes_per_op`` per op record) would not fit ``limit``."""
    try:
        size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(glob.escape(run_dir), "*" + schema.OPS_SUFFIX)))
    except OSError:
        return False
    return size // schema.RECORD_SIZE * bytes_per_op > memory_limit(limit)
