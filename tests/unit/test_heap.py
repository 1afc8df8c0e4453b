"""analysis.partitioned.heap: with the thresholds raised, the pages of freed 1-6 MB arrays are
reused by the next ones (no page faults); with glibc's defaults the heap gives them back and
each round faults them in again. Counted in fresh processes (page faults, not time)."""
import subprocess
import sys

import pytest

CODE = r"""
import resource, sys
import numpy as np
from commtrace.analysis.partitioned.heap import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory() and keep_freed_memory()      # once per process; asking again is harmless
def round_of_arrays():                                       # as a task: several 1-6 MB arrays, then all freed
    arrays = [np.ones(k << 17) for k in range(1, 7)]         # 21 MB in all
    del arrays
round_of_arrays()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(20):
    round_of_arrays()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux") or "glibc" not in " ".join(__import__("platform").libc_ver()),
                    reason="glibc's mallopt only")
def test_freed_arrays_are_reused_without_page_faults():
    kept, default = faults("keep"), faults("default")
    assert kept < 1000 < 20 * 1000 < default       # ~5,000 pages per round fault in again without
