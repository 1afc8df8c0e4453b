"""Peak resident memory of this process, in KiB, as the kernel keeps it for the current
address space (``VmHWM`` in /proc/self/status).

Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries ``ru_maxrss`` across
``execve``, so a benchmark child started by a big parent (run_all.py after it has
analysed a 6.4 M-op run) starts with the parent's high-water mark and its own growth
reads as 0. ``VmHWM`` starts afresh at exec. Falls back to ``ru_maxrss`` where there
is no /proc.
"""
from __future__ import annotations

import resource


def peak_rss_kib() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
