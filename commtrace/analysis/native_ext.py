"""The analysis's C++ kernels (``native/analysis_kernels.cpp``), as ``commtrace.native``
discovers them (``commtrace build-native``); ``intervals``, ``steps``, ``step_table`` and
``partitioned`` (partition_map, merge) use them when built and fall back to their numpy code otherwise. Plain CPython API over int64 buffers: no torch
headers or symbols, so loading it imports no torch (an analysis never does)."""
from __future__ import annotations

from .. import native

# uses_torch=False: compiled without torch's flags or libraries (native._compile_plain)
EXTENSION = native.Extension("commtrace_analysis_kernels", ("analysis/native/analysis_kernels.cpp",),
                             uses_torch=False)


def extensions() -> list[tuple[str, native.Extension | None]]:
    return [("analysis kernels", EXTENSION)]


_by_mode: dict = {}   # native.mode() -> the module or None (every interval operation asks)


def kernels():
    """The loaded kernel module, or None (not built, COMMTRACE_NATIVE=0, or it failed to load)."""
    m = native.mode()
    if m not in _by_mode:
        _by_mode[m] = native.load(EXTENSION)
    return _by_mode[m]
