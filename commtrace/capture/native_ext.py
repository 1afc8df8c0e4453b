"""The native wrapper's C++ extension, as ``commtrace.native`` discovers it
(``commtrace build-native``); ``native_wrapper`` loads and uses it."""
from __future__ import annotations

from .. import native

EXTENSION = native.Extension("commtrace_traced_pg", ("capture/native/traced_pg.cpp",))


def extensions() -> list[tuple[str, native.Extension | None]]:
    return [("native wrapper", EXTENSION)]
