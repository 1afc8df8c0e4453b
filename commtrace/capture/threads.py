"""Threads commtrace runs in a traced process, invisible to the program.

The flush, hang-watchdog, signal and waiter threads are started with
``_thread`` rather than ``threading.Thread``: ``threading.enumerate()`` and
``threading.active_count()`` then show the program the threads it would have
without commtrace (test suites check them for leaks). Like daemon threads they
are not joined at exit. Their names are kept here for the state dumps.
Code running on them must not call ``threading.current_thread()``: that would
register a dummy Thread object, visible again.
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
    """The name of a running hidden thread, else None."""
    return _names.get(ident)
