"""Keep freed memory in the process's heap for the next array (glibc's malloc).

glibc serves each allocation above its mmap threshold (128 KiB, raised only as big blocks are
freed) with a fresh ``mmap``, hands it back with ``munmap`` and trims the heap top above its trim
threshold; an analysis task allocates and frees hundreds of 0.1-6 MB numpy arrays (one rank's
100,000 ops: 800 KB per int64 column), so each new array's pages fault in again (~2,000 faults per
rank for the interval sets alone). Raising both thresholds keeps freed blocks in the heap: the same
peak (38 B/op), freed memory kept until the process ends (a pool worker, or a command's analysing
process; ``analyse`` called from a library user's process changes that process's thresholds).
Measured on the 2-core VM (64 ranks x 100,000 ops, docs/report-performance.md): -17 % CPU serial,
-30 % with a pool of 2 (both processes fault into one kernel's memory management); the analysing
process, which folds the results: 0.38-0.41 s of CPU instead of 0.41-0.52. Nothing changes where
glibc's ``mallopt`` does not exist."""
from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3   # glibc's malloc.h
MMAP_THRESHOLD = 64 << 20     # blocks up to this size come from the heap (glibc caps it at 32 MiB on some versions)
TRIM_THRESHOLD = 512 << 20    # free memory the heap keeps at its top
_done = False


def keep_freed_memory() -> bool:
    """Set the thresholds once per process; True when glibc took them."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):    # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    took = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) or mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    _done = bool(took and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
