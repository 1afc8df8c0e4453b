"""Which ops are running, and when each finished: the op rows of one process.

A row is ``[t_call, t_return, t_end, seq, sig, iteration, group, status, flags]`` (monotonic ns, 0 =
not known yet). The hot path appends finished rows to ``rows``, keeps a row in ``active`` while
inside the backend call and hands async ops to ``track``; the flush thread ``collect``s. An async
end is timed by a future callback (big CPU ops), polling (small ones: FLAG_END_OBSERVED), an end
event on a private stream (CUDA, ``cuda_end``) or a waiter thread (gloo's tensor reduce-scatter,
which can be neither polled nor called back). Never a host sync.
"""
from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
import weakref

from ..trace import schema

T_CALL, T_RETURN, T_END, SEQ, SIG, ITER, GROUP, STATUS, FLAGS = range(9)

# An op still running after this long is written with status IN_FLIGHT (once),
# so a later SIGKILL still leaves evidence of what the rank was waiting for.
IN_FLIGHT_AFTER_NS = 1_000_000_000
# Async ops of at least this many bytes get a future callback: it takes the GIL on the
# backend's thread (~5 us of contention), noise for a big op, double the cost of a tiny one.
CALLBACK_MIN_BYTES = int(os.environ.get("COMMTRACE_CALLBACK_MIN_BYTES", 64 * 1024))
_POLL_PER_CALL = 8
# At exit, how long close() lets backend threads run and release the callbacks of finished ops.
CALLBACK_DRAIN_S = 2.0

# Row flags that never reach disk (pack_rows keeps the low bits only): handed to the
# waiter thread; the end time comes from a CUDA event (device_ends).
_HANDED = 0x100
_DEVICE_EVENT = 0x200
# A p2p op whose caller is inside its wait() (wrapper._WatchedP2PWork): not collected until it
# returns, which says whether the op failed.
FLAG_IN_WAIT = 0x400


def sig_of(row: list) -> int:
    """The row's sig id, describing a call still inside the backend first (-1 if that fails)."""
    s = row[SIG]
    if type(s) is int:
        return s
    try:
        return s[0].deferred_sig(row, s)
    except Exception:
        return -1


class CompletionTracker:
    """The rows of one process's files (a new tracker per file set: fork, restart).

    ``sig_*``: the Recorder's per-sig lists (shared); ``on_error(t_call, group, seq,
    sig, text)`` records an async op's failure found while collecting."""

    def __init__(self, sig_bytes: list, sig_p2p: list, sig_cuda: list, on_error):
        self.sig_bytes, self.sig_p2p, self.sig_cuda = sig_bytes, sig_p2p, sig_cuda
        self.on_error = on_error
        self.rows: list[list] = []          # finished rows, appended by the hot path
        self.pending: list[tuple] = []      # (row, work, cpu) awaiting completion
        self.active: dict[int, list] = {}   # id(row) -> row while inside the backend call
                                            # (its SIG slot may still hold the call: see sig_of)
        # (row, work) of small async ops, polled for completion, oldest first. Several
        # threads take from it (callers, the flush thread): each entry is taken with one
        # popleft and put back if still running, so none is lost between two threads.
        self.unobserved: collections.deque = collections.deque()
        self.callbacks = weakref.WeakSet()  # _EndCallbacks the backend has not released yet
        self.device_ends: list[tuple] = []  # (row, end event, device index) of CUDA ops
        self.cuda_timer = None              # cuda_end.CudaEndTimer, made at the first CUDA op
        self._timer_lock = threading.Lock()
        self._waiter = None                 # queue of the waiter thread (_wait_each), made at first use
        self._inflight_written: set[int] = set()

    def track(self, row: list, work, sig: int, cpu: bool) -> None:
        """Arrange for an async op's end time to be recorded (hot path; see the module)."""
        if not cpu:
            index = self.sig_cuda[sig]
            if index is not None:
                ev = self._cuda_end_event(work, index)
                if ev is not None:
                    row[FLAGS] |= _DEVICE_EVENT
                    self.device_ends.append((row, ev, index))
                    self.pending.append((row, work, cpu))
                    return
        if cpu and self.sig_bytes[sig] >= CALLBACK_MIN_BYTES:
            try:
                cb = _EndCallback(row)
                work.get_future().add_done_callback(cb)
                self.callbacks.add(cb)
                self.pending.append((row, work, cpu))
                return
            except Exception:
                pass  # no future for this op/backend: poll instead
        row[FLAGS] |= schema.FLAG_END_OBSERVED
        self.unobserved.append((row, work))
        self.pending.append((row, work, cpu))

    def end_blocking_p2p(self, t_call: int, mine) -> None:
        """Stamp now as the end of the polled p2p ops issued since ``t_call`` by the calling thread
        (``mine(sig)``) whose end is not known yet: a blocking send/recv that returned."""
        now = time.monotonic_ns()
        for row, _ in reversed(list(self.unobserved)):  # the polled ops, newest first
            if row[T_CALL] < t_call:
                return
            if row[T_END] == 0 and type(row[SIG]) is int and self.sig_p2p[row[SIG]] and mine(row[SIG]):
                row[T_END] = now

    def observe_completions(self, most: int = _POLL_PER_CALL, poll: bool = True) -> None:
        """Poll the oldest small async ops (at most ``most``); ``poll=False`` only drops ended ones."""
        un = self.unobserved
        for _ in range(most):
            try:
                entry = un.popleft()
            except IndexError:
                return
            row, work = entry
            if row[T_END] == 0:
                if not poll:
                    un.appendleft(entry)
                    return
                try:
                    if not work.is_completed():
                        un.appendleft(entry)
                        return
                except Exception:
                    pass  # cannot be polled: completion stays unknown (NaN end)
                else:
                    row[T_END] = time.monotonic_ns()

    def _cuda_end_event(self, work, index: int):
        try:
            if self.cuda_timer is None:
                with self._timer_lock:  # once; two threads must not each make one
                    if self.cuda_timer is None:
                        from .cuda_end import CudaEndTimer
                        self.cuda_timer = CudaEndTimer()
            return self.cuda_timer.end_event(work, index)
        except Exception:
            return None  # no future, no CUDA context, ...: polled instead

    def collect(self, final: bool) -> list[list]:
        """The rows to write now: finished ones, and a snapshot (status IN_FLIGHT, once)
        of each op running longer than IN_FLIGHT_AFTER_NS (``final``: of every op running)."""
        now = time.monotonic_ns()
        n = len(self.rows)
        out = self.rows[:n]
        del self.rows[:n]
        if self._inflight_written:
            for row in out:
                self._inflight_written.discard(id(row))
        if self.device_ends:
            self._read_device_ends(final)
        n = len(self.pending)
        still = []
        for entry in self.pending[:n]:
            row, work, cpu = entry
            if row[FLAGS] & (_DEVICE_EVENT | FLAG_IN_WAIT):
                still.append(entry)  # timed by its end event (_read_device_ends), or being waited for
                continue
            if row[T_END] == 0 and row[FLAGS] & schema.FLAG_END_OBSERVED and _is_completed(work):
                row[T_END] = time.monotonic_ns()  # no callback: observed now
            if row[T_END] == 0 and cpu and not self.sig_p2p[row[SIG]]:
                self._maybe_hand_to_waiter(row, work, final)
            if row[T_END]:
                error = _work_error(work) if cpu else None  # (the waiter may have marked it failed already)
                if error is not None or row[STATUS] == schema.STATUS_FAILED:
                    row[STATUS] = schema.STATUS_FAILED
                    if error is not None:
                        self.on_error(row[T_CALL], row[GROUP], row[SEQ], row[SIG], error)
                else:
                    row[STATUS] = schema.STATUS_COMPLETED
                out.append(row)
                self._inflight_written.discard(id(row))
            else:
                still.append(entry)
        del self.pending[:n]
        self.pending.extend(still)
        if self.unobserved:   # let go of the works whose end the collection above stamped
            self.observe_completions(most=len(self.unobserved), poll=False)
        # Long-running ops (pending or blocked inside the backend) get an IN_FLIGHT record.
        candidates = [e[0] for e in still] + list(self.active.values())
        for row in candidates:
            if id(row) in self._inflight_written and not final:
                continue
            if final or now - row[T_CALL] > IN_FLIGHT_AFTER_NS:
                if sig_of(row) < 0:
                    continue
                snap = list(row)
                snap[STATUS] = schema.STATUS_IN_FLIGHT
                out.append(snap)
                self._inflight_written.add(id(row))
        return out

    def _read_device_ends(self, final: bool) -> None:
        ends = self.device_ends
        n = len(ends)  # the hot path appends concurrently: take a prefix, keep the rest
        still = []
        for entry in ends[:n]:
            row, ev, index = entry
            if row[T_END] == 0:
                try:
                    t = self.cuda_timer.end_ns(ev, index)
                except Exception:
                    t = None
                if t is None:
                    if not final:
                        still.append(entry)
                        continue
                    row[FLAGS] |= schema.FLAG_END_OBSERVED  # exiting: fall back to polling
                else:
                    row[T_END] = max(t, row[T_CALL])  # anchor error must not put the end first
            row[FLAGS] &= ~_DEVICE_EVENT
        del ends[:n]
        ends[:0] = still

    def _maybe_hand_to_waiter(self, row: list, work, final: bool = False) -> None:
        """A CPU collective with no future (is_completed() never turns True) is waited for on
        a helper thread. Collective works tolerate a second wait(); p2p works never come here."""
        if work is None or (row[FLAGS] & _HANDED and not final):
            return
        if not row[FLAGS] & _HANDED:
            with contextlib.suppress(Exception):
                work.get_future()
                return  # has a future: polling will see it finish
        row[FLAGS] |= _HANDED
        if final:  # exiting: a short bounded wait here instead of a thread
            from datetime import timedelta
            with contextlib.suppress(Exception):
                work.wait(timedelta(milliseconds=200))
                row[T_END] = time.monotonic_ns()
            return
        if self._waiter is None:
            import queue

            from . import threads
            self._waiter = queue.SimpleQueue()
            threads.start(_wait_each, "commtrace-waiter", self._waiter)
        self._waiter.put((row, work))

    def unfinished(self) -> list[tuple[list, str]]:
        """Ops not finished yet as (row, where): inside the backend call, or async and pending."""
        out = [(row, "in_backend_call") for row in list(self.active.values())]
        out += [(item[0], "async_pending") for item in list(self.pending) if not item[0][T_END]]
        return out

    def drain_callbacks(self, timeout_s: float) -> None:
        """Wait (GIL released) until backend threads dropped the callbacks of completed ops."""
        if not self.callbacks:
            return
        in_flight = {id(row) for row, work, _ in self.pending if not row[T_END] and not _is_completed(work)}
        deadline = time.monotonic() + timeout_s
        while any(id(cb.row) not in in_flight for cb in list(self.callbacks)):
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)


class _EndCallback:
    """Future callback that stamps a row's end time (on the backend's thread). Tracked weakly:
    a backend thread that drops it while the interpreter finalizes aborts the process,
    so close() waits until they are gone (``drain_callbacks``)."""

    __slots__ = ("row", "__weakref__")

    def __init__(self, row):
        self.row = row

    def __call__(self, _fut):
        self.row[T_END] = time.monotonic_ns()


def _wait_each(q) -> None:
    """The waiter thread: wait()s on the hand-off works of ``q``, one after another."""
    while True:
        row, work = q.get()
        try:
            work.wait()
        except Exception:
            row[STATUS] = schema.STATUS_FAILED
        row[T_END] = time.monotonic_ns()


def _is_completed(work) -> bool:
    try:
        return bool(work.is_completed())
    except Exception:
        return False


def _work_error(work) -> str | None:
    """Why a finished CPU work failed ("Type: message"), else None; read off its done future.
    Never ``work.wait()``: a second wait on gloo's send/recv blocks until the next transfer."""
    if work is None:
        return None
    try:
        fut = work.get_future()
    except Exception:
        return None
    try:
        if fut.done():
            fut.value()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"
