"""Which of the launcher variables commtrace put in the environment the program read.

A program may choose differently because of them (Lightning takes LOCAL_RANK as
"launched externally"), so the run says so. Every Python lookup of ``os.environ``
goes through ``os._Environ.__getitem__``, wrapped while a set variable is unread.
Lookups from C (``getenv``) are not seen; nor is a walk over every variable
(``os.environ.items()``, as ``import torch`` does through tqdm), which looks for none.
"""
from __future__ import annotations

import functools
import os
import sys

# Modules whose frames lie between a lookup and the code that asked for it (_collections_abc's
# functions run with __name__ "collections.abc": it renames itself).
_MAPPING_FRAMES = ("os", "_collections_abc", "collections.abc")


class EnvReads:
    def __init__(self, names):
        self.pending = set(names)
        self.read: list[str] = []          # in the order the program first read them
        self._cls = type(os.environ)
        self._orig = None

    def start(self) -> "EnvReads":
        if not self.pending or self._orig is not None:
            return self
        cls, orig = self._cls, self._cls.__getitem__
        self._orig = orig
        reads = self

        @functools.wraps(orig)
        def __getitem__(env, key):
            if key in reads.pending:       # one set lookup per read; the rest costs only here
                reads._note(key)
            return orig(env, key)
        cls.__getitem__ = __getitem__
        return self

    def _note(self, key: str) -> None:
        frame = sys._getframe(2)           # above __getitem__ and _note
        while frame is not None and frame.f_globals.get("__name__") in _MAPPING_FRAMES:
            if frame.f_code.co_name == "__iter__":
                return                     # items()/values() walking the whole environment (tqdm's
            frame = frame.f_back           # import scans it for TQDM_*): no variable was looked for
        caller = frame.f_globals.get("__name__", "") if frame is not None else ""
        if caller == "commtrace" or caller.startswith("commtrace."):
            return                         # commtrace's own reads (trace header, launcher detection)
        if key in self.pending:
            self.pending.discard(key)
            self.read.append(key)
        if not self.pending:
            self.stop()

    def stop(self) -> list[str]:
        """Put the original lookup back; the names read so far."""
        if self._orig is not None:
            self._cls.__getitem__ = self._orig
            self._orig = None
        return list(self.read)


def notice(read: list[str]) -> str:
    """The one line rank 0 prints when the program read variables commtrace set."""
    return (f"commtrace: the program read {', '.join(read)}, set by commtrace from the launcher's variables; "
            f"untraced it would not find {'it' if len(read) == 1 else 'them'} (commtrace run --no-launcher-env "
            f"or COMMTRACE_LAUNCHER_ENV=0 leaves them unset)")
