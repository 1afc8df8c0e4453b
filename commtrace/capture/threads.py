"""Threads commtrace runs in a traced process, invisible to the program.

Started with ``_thread``, so ``threading.enumerate()`` shows the program its own threads
only (test suites check them for leaks); not joined at exit. Code on them must not call
``threading.current_thread()`` (that registers a visible dummy Thread).
"""
from __future__ import annotations

import _thread

_names: dict[int, str] = {}  # ident -> name, while the thread runs


def start(target, name: str, *args) -> None:
    """Run ``target(*args)`` on a new hidden thread called ``name``."""
    def run():
        ident = _thread.get_ident()
        _names[ident] = name
        try:
            target(*args)
        finally:
            _names.pop(ident, None)

    _thread.start_new_thread(run, ())


def name_of(ident: int) -> str | None:
    return _names.get(ident)
