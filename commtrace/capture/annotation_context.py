"""The annotations in force when an op is called (phase, region, module, bucket, ...).

Each combination is interned once as a *context key* (sorted ``(field, value)`` pairs)
with a small int id: the hot path reads ``context_key`` (Python wrapper) or ``context_id``
(native). A thread may have its own for a scope (a comm hook's bucket, on a backend
thread). The C++ log reads ``iteration``, ``context_id`` and ``thread_context_ids`` off
the Recorder by name (``native/log.h``): they stay plain attributes.
"""
from __future__ import annotations

import threading

_get_ident = threading.get_ident
_FIELD_CACHE_MAX = 100_000  # set_context_field's cache: bounded for programs with endless distinct names


class AnnotationContext:
    def __init__(self):
        self._ids_lock = threading.Lock()  # two threads must not give one key two ids
        self.iteration = 0            # training step, set by annotation hooks
        self.context_key = None
        self.context_id = 0           # small int naming context_key (the native wrapper's key)
        self._context_ids: dict = {None: 0}
        self._context: dict = {}
        self._field_cache: dict = {}  # set_context_field: (key, field, value) -> (context, key, id)
        # Per-thread contexts overriding the process-wide one (thread ident -> context key / id).
        # Empty outside comm hooks, so the hot path pays one truthiness test. Mutated in place,
        # never rebound: the native wrapper's log holds thread_context_ids.
        self.thread_context_keys: dict = {}
        self.thread_context_ids: dict = {}
        self._thread_fields: dict = {}
        # Python threads the program started (a metrics all_reduce, an async checkpoint): they read
        # no process-wide field (the main thread's phase and module are not theirs) until they set one.
        self._blank_threads: set = set()

    def forget_other_threads(self) -> None:
        """In a forked child: only the forking thread exists there."""
        self._ids_lock = threading.Lock()
        ident = threading.get_ident()
        for d in (self.thread_context_keys, self.thread_context_ids, self._thread_fields):
            for k in [k for k in d if k != ident]:
                del d[k]  # in place: the native log holds thread_context_ids
        self._blank_threads &= {ident}

    def _id_of(self, key) -> int:
        cid = self._context_ids.get(key)
        if cid is None:  # a new combination (rare); comm hooks add ids from other threads
            with self._ids_lock:
                cid = self._context_ids.setdefault(key, len(self._context_ids))
        return cid

    # -- the process-wide context ---------------------------------------------
    def set_context(self, **fields) -> None:
        """Merge ``fields`` into the annotation context (None removes a field)."""
        self.claim_context()
        ctx = {k: v for k, v in {**self._context, **fields}.items() if v is not None}
        key = tuple(sorted(ctx.items())) or None
        cid = self._id_of(key)
        self._context, self.context_key, self.context_id = ctx, key, cid

    def set_context_field(self, name: str, value) -> None:
        """``set_context(**{name: value})`` for a field that changes often (capture.module_tracker sets
        ``module`` at every module boundary): each (context, field, value) is merged once."""
        blank = self._blank_threads
        if blank and _get_ident() in blank:  # claim_context, inline: a module boundary's cost
            self._claim()
        k = (self.context_key, name, value)
        hit = self._field_cache.get(k)
        if hit is None:
            self.set_context(**{name: value})
            if len(self._field_cache) < _FIELD_CACHE_MAX:
                self._field_cache[k] = (self._context, self.context_key, self.context_id)
            return
        self._context, self.context_key, self.context_id = hit  # the id too: hashing the key costs

    def push_context_field(self, name: str, value) -> tuple:
        """``push_context(**{name: value})`` through set_context_field's cache."""
        blank = self._blank_threads
        if blank and _get_ident() in blank:
            return self._push_own({name: value})
        token = (self._context, self.context_key, self.iteration, self.context_id)
        self.set_context_field(name, value)
        return token

    def push_context(self, **fields) -> tuple:
        """Set fields for a scope; returns the token ``pop_context`` restores. On a program
        thread that set no field itself (begin_program_thread): its own context's fields."""
        blank = self._blank_threads
        if blank and _get_ident() in blank:
            return self._push_own(fields)
        token = (self._context, self.context_key, self.iteration, self.context_id)
        self.set_context(**fields)
        return token

    def pop_context(self, token: tuple) -> None:
        if len(token) == 3:  # _push_own's
            if token[1] in self._blank_threads:
                self.pop_thread_context(token[1:])
            return
        self._context, self.context_key, _, self.context_id = token

    def context_fields(self) -> dict:
        return dict(self._context)

    def context_field(self, name: str):
        """One field of the context the calling thread reads (None if unset): the process-wide
        one, or on a program thread that set no field itself, its own (the main thread's phase
        or region is not its: a scope that sets a phase only where none is set sets it there)."""
        blank = self._blank_threads
        if blank:
            ident = _get_ident()
            if ident in blank:
                return self._thread_fields.get(ident, {}).get(name)
        return self._context.get(name)

    # -- per-thread contexts ------------------------------------------------------
    def begin_program_thread(self) -> tuple:
        """A Python thread of the program begins: it reads an empty context (its ops have no
        phase or module), and its scopes (an object collective's, ``commtrace.region``) are its
        own: pushed on the process-wide context they raced the main thread's (a pop restored
        what the main thread had left, and its labels stayed stale). Until it claims the
        process-wide context (``claim_context``: it trains, in a thread). The token is for
        ``end_program_thread``."""
        token = self.push_thread_context({})
        self._blank_threads.add(token[0])
        return token

    def end_program_thread(self, token: tuple) -> None:
        if token[0] in self._blank_threads:
            self._claim()

    def claim_context(self) -> None:
        """The calling thread sets process-wide fields (a forward, a backward, an optimizer
        step, a module boundary): from now on it reads and sets them."""
        blank = self._blank_threads
        if blank and _get_ident() in blank:
            self._claim()

    def _claim(self) -> None:
        ident = _get_ident()
        self._blank_threads.discard(ident)
        self.pop_thread_context((ident, None))

    def _push_own(self, fields: dict) -> tuple:
        ident = _get_ident()
        return ("own", *self.push_thread_context({**self._thread_fields.get(ident, {}), **fields}))

    def current_context_key(self):
        """The context key in force on the calling thread (its own, else the process's)."""
        own = self.thread_context_keys
        return own.get(threading.get_ident(), self.context_key) if own else self.context_key

    def push_thread_context(self, fields: dict) -> tuple:
        """Make ``fields`` the whole annotation context of the calling thread for a
        scope (the process-wide context and other threads are unaffected);
        returns the token for ``pop_thread_context``."""
        ident = threading.get_ident()
        prev = self._thread_fields.get(ident)
        ctx = {k: v for k, v in fields.items() if v is not None}
        key = tuple(sorted(ctx.items())) or None
        cid = self._id_of(key)  # ids stay unique across threads
        self._thread_fields[ident] = ctx
        self.thread_context_keys[ident] = key
        self.thread_context_ids[ident] = cid
        return (ident, prev)

    def pop_thread_context(self, token: tuple) -> None:
        ident, prev = token
        if prev is None:
            self.thread_context_keys.pop(ident, None)
            self.thread_context_ids.pop(ident, None)
            self._thread_fields.pop(ident, None)
            return
        key = tuple(sorted(prev.items())) or None
        self._thread_fields[ident] = prev
        self.thread_context_keys[ident] = key
        self.thread_context_ids[ident] = self._context_ids[key]

    def thread_context_fields(self) -> dict | None:
        """The calling thread's own annotation fields (push_thread_context), or None."""
        own = self._thread_fields.get(threading.get_ident()) if self._thread_fields else None
        return None if own is None else dict(own)
