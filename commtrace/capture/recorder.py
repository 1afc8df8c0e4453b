"""Per-process recording state: interned sigs and groups, op buffers, the flush thread.

The hot path (``wrapper``) only appends rows to ``rows`` or ``pending`` and reads
``sig_ids``; packing and writing happen on the flush thread every
``FLUSH_INTERVAL_S``, so an op completed more than a second before a SIGKILL is
on disk (in ring mode, ``bounded.CallOrder``, an op called after one still
running may wait up to ``IN_FLIGHT_AFTER_NS`` more). A row is ``[t_call,
t_return, t_end, seq, sig, iteration, group, status, flags]`` with monotonic ns
(0 = not yet known).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref

from .. import __version__
from ..trace import schema
from ..trace.writer import TraceWriter, pack_rows, pack_spans

FLUSH_INTERVAL_S = 0.5
# An op still running after this long is written with status IN_FLIGHT (once),
# so a later SIGKILL still leaves evidence of what the rank was waiting for.
IN_FLIGHT_AFTER_NS = 1_000_000_000

T_CALL, T_RETURN, T_END, SEQ, SIG, ITER, GROUP, STATUS, FLAGS = range(9)

# Async ops moving at least this many bytes get a completion callback on their
# future: it runs on the backend's thread and must take the GIL (~5 us of
# contention per op), which is noise for a big op but doubles the cost of a tiny
# one. Smaller async ops are timed by polling is_completed() on the next traced
# call and on the flush thread; their t_end is flagged FLAG_END_OBSERVED.
CALLBACK_MIN_BYTES = int(os.environ.get("COMMTRACE_CALLBACK_MIN_BYTES", 64 * 1024))
_POLL_PER_CALL = 8


# At exit, how long close() lets backend threads finish running (and release)
# the completion callbacks of ops that already completed.
CALLBACK_DRAIN_S = 2.0
# At interpreter exit, a GIL-free pause after the final flush. gloo's worker
# thread destroys a finished op's Work right after completing it, and that
# destructor may take the GIL (torch's AsyncWork keeps the caller's thread-local
# state, Python objects included). If the interpreter is already finalizing,
# Python kills that thread inside C++ and the process aborts with "terminate
# called without an active exception" -- seen in torch 2.13 with and without
# commtrace, e.g. right after a final dist.barrier(). atexit handlers run before
# finalization, so pausing here lets those threads finish first.
EXIT_SETTLE_S = 0.05


class _EndCallback:
    """Future callback that stamps a row's end time (on the backend's thread).

    Tracked weakly by the Recorder: the backend thread runs it, then drops it,
    taking the GIL both times. If the interpreter is finalizing by then, that
    thread is killed inside C++ code and the process aborts ("terminate called
    without an active exception"): close() waits until they are gone.
    """

    __slots__ = ("row", "__weakref__")

    def __init__(self, row):
        self.row = row

    def __call__(self, _fut):
        self.row[T_END] = time.monotonic_ns()


class Recorder:
    def __init__(self, run_dir: str, run_id: str, launcher: str, command: list[str]):
        self.run_dir = run_dir
        self.run_id = run_id
        self.launcher = launcher
        self.command = command
        self.t_wall0 = time.time_ns()
        self.t_mono0 = time.monotonic_ns()
        self._lock = threading.RLock()
        self._final_flush = False
        self._reset_state()
        self.iteration = 0            # training step, set by annotation hooks
        # Annotations that change rarely (phase, region, ...) are part of every
        # sig key, so the hot path reads one attribute instead of building a dict.
        self.context_key = None
        self.context_id = 0           # small int naming context_key (the native wrapper's key)
        self._context_ids: dict = {None: 0}
        self._context: dict = {}
        self._field_cache: dict = {}  # set_context_field: (key, field, value) -> (context, key)
        # Per-thread contexts overriding the process-wide one (thread ident ->
        # context key / id; see push_thread_context): a comm hook's bucket scope,
        # which may run on a backend thread while the main thread goes on. Empty
        # outside comm hooks, so the hot path pays one truthiness test. Mutated in
        # place, never rebound: the native wrapper's log holds thread_context_ids.
        self.thread_context_keys: dict = {}
        self.thread_context_ids: dict = {}
        self._thread_fields: dict = {}
        self.native_log = None        # the native wrapper's C++ log (native_wrapper), if any group uses it
        self.clock_lines: list[dict] = []
        # Span labels, like sig lines, are definitions a forked child's file re-states.
        self.label_ids: dict = {}
        self.label_lines: list[dict] = []
        self.exit_info: tuple[int, str] | None = None  # set by the runner, written at close
        # Tracing sessions of this process: a restart after close() (commtrace.start
        # after commtrace.stop) writes files of its own, named ...pid<P>.s<session>.
        self.session = 1
        self.bounded = _bounded_options()  # capture.bounded.Options, or None: every op written
        atexit.register(self._close_at_exit)
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def start(self) -> None:
        """Write this process's start record now (header: command, launcher
        variables), before it creates any process group -- so a process that
        dies before ``init_process_group`` still leaves its trace file."""
        with self._lock:
            if self.writer is None and not self.closed:
                self._new_writer(self._stem(f"proc.{_host_stem()}"))
                self.writer.write([self.header(), *self.clock_lines], None)

    # -- state ---------------------------------------------------------------
    def _reset_state(self) -> None:
        self.pid = os.getpid()
        self.rows: list[list] = []          # finished rows, appended by the hot path
        self.pending: list[tuple] = []      # (row, work) awaiting completion
        self.active: dict[int, list] = {}   # id(row) -> row while inside the backend call
                                            # (its SIG slot may still hold the call: see sig_of)
        self.unobserved: list[tuple] = []   # (row, work) of small async ops, polled for completion
        self.spans: list[tuple] = []        # compute spans (add_span) not yet written
        self.callbacks = weakref.WeakSet()  # _EndCallbacks the backend has not released yet
        self.sig_bytes: list[int] = []      # sig id -> bytes (callback or polling)
        self.sig_cpu: list[bool] = []       # sig id -> op runs on CPU tensors
        self.sig_p2p: list[bool] = []       # sig id -> send/recv (never waited by us)
        self.sig_cuda: list = []            # sig id -> CUDA device index of a device op, else None
        self.device_ends: list[tuple] = []  # (row, end event, device index) of CUDA ops
        self._cuda_timer = None
        self._waiter: "_Waiter | None" = None
        self.sig_ids: dict = {}             # cheap call key -> sig id
        self.sig_lines: list[dict] = []
        self.group_lines: list[dict] = []
        self.world_lines: list[dict] = []
        self.meta_queue: list[dict] = []
        self.rank: int | None = None
        self.writer: TraceWriter | None = None
        self.coverage = None                # capture.bounded.Coverage of the current files (bounded mode)
        self.call_order = None              # capture.bounded.CallOrder of the current files (ring mode)
        self._inflight_written: set[int] = set()
        self._thread = None                 # True once the flush thread runs
        self._stop = threading.Event()
        self.closed = False

    # What a new file of the same process re-states: the wrappers keep using these ids.
    _DEFINITIONS = ("sig_ids", "sig_lines", "group_lines", "world_lines", "sig_bytes", "sig_cpu", "sig_p2p",
                    "sig_cuda")

    def _reset_keeping_definitions(self) -> None:
        defs = {name: getattr(self, name) for name in self._DEFINITIONS}
        self._reset_state()
        self.__dict__.update(defs)

    def _after_fork_in_child(self) -> None:
        # The child keeps sig/group definitions (its wrappers still use those ids)
        # but writes its own files; buffered rows belong to the parent.
        rank = self.rank
        started = self.writer is not None
        self._lock = threading.RLock()
        ident = threading.get_ident()  # the other threads' contexts: those threads are not in the child
        for d in (self.thread_context_keys, self.thread_context_ids, self._thread_fields):
            for k in [k for k in d if k != ident]:
                del d[k]  # in place: the native log holds thread_context_ids
        self._reset_keeping_definitions()
        if self.native_log is not None:
            self.native_log.after_fork_in_child()
        if rank is not None:
            self._open(rank)
        elif started:
            self.start()

    # -- definitions (rare; under the lock) -----------------------------------
    def add_sig(self, key, desc: dict) -> int:
        with self._lock:
            sid = self.sig_ids.get(key)
            if sid is not None:
                return sid
            sid = len(self.sig_lines)
            cpu = bool(desc.pop("cpu", True))
            cuda_index = desc.pop("cuda_index", None)
            line = {"type": schema.META_SIG, "id": sid, **desc}
            self.sig_lines.append(line)
            self.sig_bytes.append(int(desc.get("bytes") or 0) + int(desc.get("out_bytes") or 0))
            self.sig_cpu.append(cpu)
            self.sig_p2p.append(desc.get("op") in schema.P2P_OPS)
            self.sig_cuda.append(None if cpu else cuda_index)
            self.meta_queue.append(line)
            self.sig_ids[key] = sid
            return sid

    def add_group(self, info: dict) -> int:
        with self._lock:
            gid = len(self.group_lines)
            line = {"type": schema.META_GROUP, "id": gid, **info}
            self.group_lines.append(line)
            self.meta_queue.append(line)
            return gid

    def add_world(self, info: dict) -> int:
        with self._lock:
            idx = len(self.world_lines)
            line = {"type": schema.META_WORLD, "world": idx, "t_mono_ns": time.monotonic_ns(), **info}
            self.world_lines.append(line)
            self.meta_queue.append(line)
            first = self.rank is None
            if first:
                self.rank = int(info.get("rank", 0))
            if first or self.writer is None:
                self._open(self.rank)
            return idx

    def set_context(self, **fields) -> None:
        """Merge ``fields`` into the annotation context (None removes a field)."""
        ctx = {k: v for k, v in {**self._context, **fields}.items() if v is not None}
        self._context = ctx
        self._set_context_key(tuple(sorted(ctx.items())) or None)

    def set_context_field(self, name: str, value) -> None:
        """``set_context(**{name: value})`` for a field that changes often (capture.module_tracker sets
        ``module`` at every module boundary): each (context, field, value) is merged once."""
        k = (self.context_key, name, value)
        hit = self._field_cache.get(k)
        if hit is None:
            self.set_context(**{name: value})
            if len(self._field_cache) < 100_000:  # bounded: a program with endless distinct names
                self._field_cache[k] = (self._context, self.context_key)
            return
        self._context, key = hit
        self._set_context_key(key)

    def push_context_field(self, name: str, value) -> tuple:
        """``push_context(**{name: value})`` through set_context_field's cache."""
        token = (self._context, self.context_key, self.iteration)
        self.set_context_field(name, value)
        return token

    def _set_context_key(self, key) -> None:
        cid = self._context_ids.get(key)
        if cid is None:  # rare; comm hooks add ids from other threads (push_thread_context)
            with self._lock:
                cid = self._context_ids.setdefault(key, len(self._context_ids))
        self.context_key = key
        self.context_id = cid

    def push_context(self, **fields) -> tuple:
        """Set fields for a scope; returns the token ``pop_context`` restores."""
        token = (self._context, self.context_key, self.iteration)
        self.set_context(**fields)
        return token

    def pop_context(self, token: tuple) -> None:
        self._context, key, _ = token
        self._set_context_key(key)

    def context_fields(self) -> dict:
        return dict(self._context)

    def context_field(self, name: str):
        """One field of the process-wide context (None if unset)."""
        return self._context.get(name)

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
        cid = self._context_ids.get(key)
        if cid is None:  # a new combination (once per bucket and scope): ids must stay unique across threads
            with self._lock:
                cid = self._context_ids.setdefault(key, len(self._context_ids))
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

    # -- completion of async ops ------------------------------------------------
    def track(self, row: list, work, sig: int, cpu: bool) -> None:
        """Arrange for an async op's end time to be recorded (hot path).

        CPU work: a future callback for big ops, polling for small ones.
        Device (CUDA) work gets an end event on a private stream (``cuda_end``),
        read lazily by the flush thread; where that is not possible it is
        polled: ``is_completed()`` queries the op's own end event (its future
        completes at enqueue). Never a host sync.
        """
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

    def _cuda_end_event(self, work, index: int):
        try:
            if self._cuda_timer is None:
                with self._lock:  # once; two threads must not each make one
                    if self._cuda_timer is None:
                        from .cuda_end import CudaEndTimer
                        self._cuda_timer = CudaEndTimer()
            return self._cuda_timer.end_event(work, index)
        except Exception:
            return None  # no future, no CUDA context, ...: polled instead

    def _read_device_ends(self, final: bool) -> None:
        """Stamp CUDA ops whose end event has completed (flush thread)."""
        ends = self.device_ends
        n = len(ends)  # the hot path appends concurrently: take a prefix, keep the rest
        still = []
        for entry in ends[:n]:
            row, ev, index = entry
            if row[T_END] == 0:
                try:
                    t = self._cuda_timer.end_ns(ev, index)
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

    def observe_completions(self) -> None:
        """Poll the oldest small async ops; called at the start of each traced op."""
        un = self.unobserved
        done = 0
        for row, work in un[:_POLL_PER_CALL]:
            if row[T_END] == 0:
                try:
                    if not work.is_completed():
                        break
                except Exception:
                    pass  # cannot be polled: completion stays unknown (NaN end)
                else:
                    row[T_END] = time.monotonic_ns()
            done += 1
        if done:
            del un[:done]

    @staticmethod
    def sig_of(row: list) -> int:
        """The row's sig id; describes the call first if its thread is still inside
        the backend call and has not looked its sig up yet (-1 if that fails)."""
        s = row[SIG]
        if type(s) is int:
            return s
        try:
            return s[0].deferred_sig(row, s)
        except Exception:
            return -1

    def add_span(self, phase: str, t_begin: int, t_end: int, step: int, label, grad: bool = True) -> None:
        """A compute span (DDP forward, backward pass, optimizer step) that just ended;
        ``label``: the DDP module's label or the optimizer's class (or None)."""
        if self.closed:
            return  # stopped: nothing is written until a restart
        lid = schema.SPAN_NO_LABEL if label is None else self.label_ids.get(label)
        if lid is None:
            with self._lock:
                lid = self.label_ids.setdefault(label, len(self.label_ids))
                line = {"type": schema.META_LABEL, "id": lid, "text": str(label)}
                self.label_lines.append(line)
                self.meta_queue.append(line)
        flags = schema.SPAN_FLAG_GRAD if grad else 0
        self.spans.append((_SPAN_PHASE[phase], t_begin, t_end, step, self.iteration, lid, flags))

    def add_meta(self, line: dict) -> None:
        with self._lock:
            if not self.closed:  # stopped: marks, errors, ... are not kept for a restart
                self.meta_queue.append(line)

    def fail(self, row: list, exc: BaseException) -> None:
        self.record_error(row[T_CALL], row[GROUP], row[SEQ], row[SIG], f"{type(exc).__name__}: {exc}")

    def record_error(self, t_call: int, group: int, seq: int, sig: int, text: str) -> None:
        """An op raised, or its async work failed (the native wrapper calls this
        directly; async failures are found while flushing, the final flush included)."""
        line = {"type": schema.META_ERROR, "t_call": t_call, "group": group, "seq": seq, "sig": sig, "text": text}
        with self._lock:
            if not self.closed or self._final_flush:
                self.meta_queue.append(line)

    def unfinished(self) -> list[tuple[list, str]]:
        """Ops not finished yet as (row, where): inside the backend call, or async and pending."""
        out = [(row, "in_backend_call") for row in list(self.active.values())]
        out += [(item[0], "async_pending") for item in list(self.pending) if not item[0][T_END]]
        if self.native_log is not None:
            out += [tuple(x) for x in self.native_log.unfinished()]
        return out

    # -- files -----------------------------------------------------------------
    def header(self) -> dict:
        from .launchvars import launcher_env
        torch = sys.modules.get("torch")  # never imported here: a process that does not use torch stays so
        return {
            "type": schema.META_HEADER, "format": schema.FORMAT_NAME, "version": schema.FORMAT_VERSION,
            "source": "python", "record_size": schema.RECORD_SIZE,
            "commtrace_version": __version__, "torch_version": getattr(torch, "__version__", None),
            "host": hostname(), "pid": self.pid, "ppid": os.getppid(), "rank": self.rank,
            "launcher": self.launcher, "launch_env": launcher_env(os.environ),
            "run_id": self.run_id, "command": self.command, "argv": list(sys.argv),
            "python": sys.version.split()[0], "cwd": os.getcwd(),
            "t_wall_ns": self.t_wall0, "t_mono_ns": self.t_mono0,
            "t_wall_open_ns": time.time_ns(), "t_mono_open_ns": time.monotonic_ns(),
            "session": self.session, "bounded": None if self.bounded is None else self.bounded.describe(),
        }

    def _stem(self, prefix: str) -> str:
        return f"{prefix}.pid{self.pid}" + (f".s{self.session}" if self.session > 1 else "")

    def _new_writer(self, stem: str) -> None:
        opts = self.bounded
        self.writer = TraceWriter(self.run_dir, stem, keep_last=opts.keep_last if opts is not None else None)
        if opts is not None:
            from .bounded import CallOrder, Coverage
            self.coverage = Coverage(opts, self.sig_lines)
            self.call_order = CallOrder() if opts.keep_last else None

    def _open(self, rank: int) -> None:
        if self.closed:
            return  # stopped (commtrace.stop): the next session's files re-state the definitions
        stem = self._stem(f"rank{rank}")
        if self.writer is not None:
            # The start file (see start) becomes the rank's file; its second
            # header line adds what is known now (rank, torch version).
            self.writer.rename(stem)
            self.writer.open_ops()
            pre = [self.header(), *self.world_lines, *self.group_lines, *self.sig_lines, *self.label_lines]
        else:
            self._new_writer(stem)
            self.writer.open_ops()
            # A fresh file (a forked child) re-states every definition.
            pre = [self.header(), *self.clock_lines, *self.world_lines, *self.group_lines, *self.sig_lines,
                   *self.label_lines]
        queued = [m for m in self.meta_queue if m not in pre]
        self.meta_queue = pre + queued
        self._start_thread()

    def _start_thread(self) -> None:
        from . import threads
        threads.start(self._run, "commtrace-flush")  # hidden from threading.enumerate()
        self._thread = True

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            try:
                self.flush()
            except Exception:  # never let tracing kill the user's job
                import traceback  # not at the top: every traced process imports this module at start
                traceback.print_exc()

    # -- flushing --------------------------------------------------------------
    def _collect(self, final: bool) -> list[list]:
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
            if row[FLAGS] & _DEVICE_EVENT:
                still.append(entry)  # timed by its end event (_read_device_ends)
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
                        self.record_error(row[T_CALL], row[GROUP], row[SEQ], row[SIG], error)
                else:
                    row[STATUS] = schema.STATUS_COMPLETED
                out.append(row)
                self._inflight_written.discard(id(row))
            else:
                still.append(entry)
        del self.pending[:n]
        self.pending.extend(still)
        if self.unobserved:
            self.unobserved = [(r, w) for r, w in self.unobserved if r[T_END] == 0]
        # Long-running ops (pending or blocked inside the backend) get an IN_FLIGHT record.
        candidates = [e[0] for e in still] + list(self.active.values())
        for row in candidates:
            if id(row) in self._inflight_written and not final:
                continue
            if final or now - row[T_CALL] > IN_FLIGHT_AFTER_NS:
                if self.sig_of(row) < 0:
                    continue
                snap = list(row)
                snap[STATUS] = schema.STATUS_IN_FLIGHT
                out.append(snap)
                self._inflight_written.add(id(row))
        return out

    def flush(self, final: bool = False) -> None:
        with self._lock:
            if self.writer is None:
                return
            order = self.call_order
            before = None if order is None or final else self._oldest_running_call()  # before collecting: see there
            rows = self._collect(final)
            packed = pack_rows(rows) if rows else None
            if self.native_log is not None:
                import numpy as np
                nat = np.frombuffer(self.native_log.drain(final), dtype=schema.OP_RECORD)
                if len(nat):
                    packed = nat if packed is None else np.concatenate([packed, nat])
            meta, self.meta_queue = self.meta_queue, []
            spans = None
            if self.spans:
                n = len(self.spans)   # the main thread appends concurrently: take a prefix
                spans = pack_spans(self.spans[:n])
                del self.spans[:n]
            if order is not None:
                packed = order.release(packed, before)
            cov = self.coverage
            if cov is not None:
                packed, spans = cov.select(packed, spans)
            self.writer.write(meta, packed, spans)
            if cov is not None and self.rank is not None and (cov.changed or final):
                self.writer.write_coverage(cov.state(self.writer))

    def _oldest_running_call(self) -> int:
        """Ring mode: the call time before which this flush's records may be written
        (``bounded.CallOrder``): that of the oldest op still running, or now. Taken
        before collecting, so an op that finishes in between is collected in this
        flush, and any op called before a record written now was finished by then.
        Ops running longer than ``IN_FLIGHT_AFTER_NS`` hold nothing back: they are
        written IN_FLIGHT, so a hang or a long recv delays no record longer than that."""
        now = time.monotonic_ns()
        young = [row[T_CALL] for row, _ in self.unfinished() if now - row[T_CALL] <= IN_FLIGHT_AFTER_NS]
        return min(young, default=now)

    def _maybe_hand_to_waiter(self, row: list, work, final: bool = False) -> None:
        """A CPU collective that can be neither polled nor called back (gloo's
        tensor reduce-scatter: no future, is_completed() never turns True) is
        waited for on a helper thread. Collective works tolerate a second
        wait(); p2p works do not and never come here."""
        if work is None or (row[FLAGS] & _HANDED and not final):
            return
        if not row[FLAGS] & _HANDED:
            try:
                work.get_future()
                return  # has a future: polling will see it finish
            except Exception:
                pass
        row[FLAGS] |= _HANDED
        if final:  # exiting: a short bounded wait here instead of a thread
            from datetime import timedelta
            try:
                work.wait(timedelta(milliseconds=200))
                row[T_END] = time.monotonic_ns()
            except Exception:
                pass
            return
        if self._waiter is None:
            self._waiter = _Waiter()
        self._waiter.add(row, work)

    def _drain_callbacks(self, timeout_s: float) -> None:
        """Wait (releasing the GIL) until backend threads have run and dropped
        the callbacks of completed ops. Ops still in flight are not waited for."""
        if not self.callbacks:
            return
        in_flight = {id(row) for row, work, _ in self.pending if not row[T_END] and not _is_completed(work)}
        deadline = time.monotonic() + timeout_s
        while any(id(cb.row) not in in_flight for cb in list(self.callbacks)):
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)

    def mark_clock(self, line: dict) -> None:
        line = {"type": schema.META_CLOCK, **line}
        with self._lock:
            self.clock_lines.append(line)
            self.meta_queue.append(line)

    def reopen(self, run_dir: str, run_id: str, launcher: str, command: list[str]) -> None:
        """A new tracing session after ``close()`` (``commtrace.start`` after ``stop``):
        new files (``...pid<P>.s<N>``, in ``run_dir``) that re-state every definition
        and clock measurement; the bounded options are read from the environment again."""
        with self._lock:
            if not self.closed:
                return
            rank = self.rank
            self._reset_keeping_definitions()
            self.rank = rank
            self.run_dir, self.run_id, self.launcher, self.command = run_dir, run_id, launcher, command
            self.session += 1
            self.bounded = _bounded_options()
            self.exit_info = None
            self.t_wall0, self.t_mono0 = time.time_ns(), time.monotonic_ns()
            if self.native_log is not None:
                self.native_log.set_paused(False)
            if rank is not None:
                self._open(rank)
            else:
                self.start()

    def _close_at_exit(self) -> None:
        traced = self.rank is not None and self.writer is not None
        if self.exit_info is None and not self.closed:
            self._note_uncaught_exception()
        self.close()
        if traced:
            time.sleep(EXIT_SETTLE_S)

    def _note_uncaught_exception(self) -> None:
        """At exit of a process not run by ``commtrace run`` (a subprocess, a
        spawned rank outside mp.spawn's wrapper): Python stores the uncaught
        exception it just printed in ``sys.last_value``; the exit code is then 1."""
        exc = getattr(sys, "last_value", None)
        if not isinstance(exc, BaseException) or isinstance(exc, SystemExit):
            return
        self.record_exception(exc)
        self.exit_info = (1, "exception")

    def record_exception(self, exc: BaseException, tb=None) -> None:
        """An ``exception`` line: the uncaught exception that ends this process."""
        import traceback
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__ if tb is None else tb))
        self.add_meta({"type": schema.META_EXCEPTION, "exc_type": type(exc).__name__, "message": str(exc),
                       "text": text})

    def add_process_info(self, **fields) -> None:
        """A ``process`` line (e.g. spawn_index), written at once."""
        self.add_meta({"type": schema.META_PROCESS, **fields})
        self.flush()

    def close(self, exit_code: int | None = None, how: str = "exit") -> None:
        """Flush everything; ops still running are written as IN_FLIGHT. Idempotent.
        From here on the wrappers forward ops without recording them (until ``reopen``)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._stop.set()
            if self.native_log is not None:
                self.native_log.set_paused(True)
            if self.writer is None:
                return
            if exit_code is None and self.exit_info is not None:
                exit_code, how = self.exit_info
            self._drain_callbacks(CALLBACK_DRAIN_S)
            self.meta_queue.append({"type": schema.META_END, "exit_code": exit_code, "how": how,
                                    "t_wall_ns": time.time_ns(), "t_mono_ns": time.monotonic_ns()})
            self._final_flush = True  # errors of async ops it finds are still written
            try:
                self.flush(final=True)
            finally:
                self._final_flush = False
            self.writer.close()


def _bounded_options():
    """The bounded-mode options in the environment (``capture.bounded``), or None.
    A bad value raises ValueError: tracing is then off in the process (one line)."""
    if not (os.environ.get(schema.ENV_KEEP_LAST) or os.environ.get(schema.ENV_STEPS)):
        return None  # the usual case: nothing more to import at start
    from .bounded import options_from_env
    return options_from_env(os.environ)


def hostname() -> str:
    """socket.gethostname() without importing socket (every traced process
    imports this module at start): both are the kernel's node name."""
    try:
        return os.uname().nodename
    except AttributeError:  # no uname (Windows)
        import socket
        return socket.gethostname()


def _host_stem() -> str:
    """The host name as it may appear in a file name (start files of processes
    on different hosts may share a pid)."""
    name = hostname().split(".")[0]
    return "".join(c if c.isalnum() or c == "-" else "_" for c in name)[:64] or "host"


_SPAN_PHASE = {name: i for i, name in enumerate(schema.SPAN_PHASES)}


# A row flag that never reaches disk (pack_rows keeps the low bits only): the
# row was handed to the waiter thread.
_HANDED = 0x100
# Another such flag: the row's end time comes from a CUDA event (device_ends).
_DEVICE_EVENT = 0x200


class _Waiter:
    """One daemon thread that wait()s on hand-off works, one after another."""

    def __init__(self):
        import queue
        from . import threads
        self.q: "queue.SimpleQueue" = queue.SimpleQueue()
        threads.start(self._run, "commtrace-waiter")

    def add(self, row, work) -> None:
        self.q.put((row, work))

    def _run(self) -> None:
        while True:
            row, work = self.q.get()
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
    """Why a finished CPU work ended in an error ("Type: message"), None if it did
    not. Never blocks.

    Reads the error off the work's *done* future. It must not call
    ``work.wait()``: a second wait on gloo's send/recv work blocks until the
    *next* transfer on that buffer, and the caller already waited. Works without
    a future (gloo send/recv) count as successful.
    """
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
