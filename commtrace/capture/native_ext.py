"""The capture's C++ extensions, as ``commtrace.native`` discovers them (``commtrace
build-native``): the native wrapper (``native_wrapper`` loads and uses it) and the
fatal-signal handler (``fatal_signals``; plain CPython API, no torch)."""
from __future__ import annotations

from .. import native

EXTENSION = native.Extension("commtrace_traced_pg", ("capture/native/traced_pg.cpp",))
FATAL_SIGNALS = native.Extension("commtrace_fatal_signals", ("capture/native/fatal_signals.cpp",),
                                 uses_torch=False)


def extensions() -> list[tuple[str, native.Extension | None]]:
    return [("native wrapper", EXTENSION), ("fatal-signal handler", FATAL_SIGNALS)]
