"""Which of the launcher variables commtrace put in the environment the program read.

A program may choose differently because of them (Lightning takes LOCAL_RANK as
"launched externally"), so the run says so. Every Python lookup of ``os.environ``
goes through ``os._Environ.__getitem__``, wrapped while a set variable is unread.
Lookups from C (``getenv``) are not seen; nor is a walk over every variable
(``os.environ.items()``, as ``import torch`` does through tqdm; a copy, ``dict(os.environ)``,
as ``import fsspec`` does, which torch.distributed.checkpoint imports), which looks for none.
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
        self._orig_iter = None
        self._walk: list | None = None     # the keys of the last whole walk over the environment,
        self._walk_next = 0                # and how many a copy made of it has looked up, in order

    def start(self) -> "EnvReads":
        if not self.pending or self._orig is not None:
            return self
        cls, orig, orig_iter = self._cls, self._cls.__getitem__, self._cls.__iter__
        self._orig, self._orig_iter = orig, orig_iter
        reads = self

        @functools.wraps(orig_iter)
        def __iter__(env):
            keys = []
            for key in orig_iter(env):
                keys.append(key)
                yield key
            reads._walk, reads._walk_next = keys, 0

        @functools.wraps(orig)
        def __getitem__(env, key):
            # dict(os.environ) lists the keys, then looks each up in that order, from C: no frame
            # of its own says so
            walk = reads._walk
            if walk is not None:
                if reads._walk_next < len(walk) and walk[reads._walk_next] == key:
                    reads._walk_next += 1
                    return orig(env, key)
                reads._walk = None
            if key in reads.pending:       # one set lookup per read; the rest costs only here
                reads._note(key)
            return orig(env, key)
        cls.__iter__ = __iter__
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
            self._cls.__getitem__, self._cls.__iter__ = self._orig, self._orig_iter
            self._orig = self._orig_iter = None
        return list(self.read)


def notice(read: list[str]) -> str:
    """The one line rank 0 prints when the program read variables commtrace set."""
    return (f"commtrace: the program read {', '.join(read)}, set by commtrace from the launcher's variables; "
            f"untraced it would not find {'it' if len(read) == 1 else 'them'} (commtrace run --no-launcher-env "
            f"or COMMTRACE_LAUNCHER_ENV=0 leaves them unset)")
