"""Per-process recording state: interned definitions, the op rows, and the files they go to.

The Recorder is the annotation context (``AnnotationContext``), holds the op rows
(``tracker``: ``completion.CompletionTracker``) and the files with their flush thread
(``sink``: ``trace_sink.TraceSink``). Here: interning definitions (sigs, groups, worlds,
span labels), queued meta lines, one flush, and the lifecycle across fork, close and reopen.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from .. import torch_compat
from ..errors import exit_status
from ..trace import schema
from ..trace.writer import pack_rows, pack_spans
from . import sigview
from .annotation_context import AnnotationContext
from .completion import CALLBACK_DRAIN_S, GROUP, IN_FLIGHT_AFTER_NS, SEQ, SIG, T_CALL, CompletionTracker
from .trace_sink import TraceSink

# At exit, a GIL-free pause after the final flush: gloo's worker thread destroys a
# finished op's Work (whose destructor may take the GIL) right after completing it; if
# the interpreter is finalizing by then, the process aborts ("terminate called without
# an active exception", torch 2.13 with or without commtrace, e.g. after a final barrier).
EXIT_SETTLE_S = 0.05

_SPAN_PHASE = {name: i for i, name in enumerate(schema.SPAN_PHASES)}


class Recorder(AnnotationContext):
    def __init__(self, run_dir: str, run_id: str, launcher: str, command: list[str]):
        super().__init__()
        self._lock = threading.RLock()
        self._final_flush = False
        self.sink = TraceSink(run_dir, run_id, launcher, command, 1)
        # Definitions: interned once per process, re-stated by every file it writes.
        self.sig_bytes: list[int] = []      # sig id -> bytes (callback or polling)
        self.sig_cpu: list[bool] = []       # sig id -> op runs on CPU tensors
        self.sig_p2p: list[bool] = []       # sig id -> send/recv (never waited by us)
        self.sig_cuda: list = []            # sig id -> CUDA device index of a device op, else None
        self.sig_ids: dict = {}             # cheap call key -> sig id
        self.sig_lines: list[dict] = []
        self.group_lines: list[dict] = []
        self.world_lines: list[dict] = []
        self.rank: int | None = None
        self._new_files_state()
        self.native_log = None        # the native wrapper's C++ log (native_wrapper), if any group uses it
        self.clock_lines: list[dict] = []
        # Span labels, like sig lines, are definitions a forked child's file re-states.
        self.label_ids: dict = {}
        self.label_lines: list[dict] = []
        self.exit_info: tuple[int, str] | None = None  # set by the runner, written at close
        self.sys_exit: SystemExit | None = None  # the last sys.exit's (activate), read at exit
        self._exit_closed = False
        # Twice: a signal pending when atexit calls the first (SIGINT: the program's handler) runs at
        # its first line, before close holds it (sigview.deferred); its exception ends that call, which
        # atexit reports, and the second closes. After a first that closed, the second returns at once.
        atexit.register(self._close_at_exit)
        atexit.register(self._close_at_exit)
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    @property
    def run_dir(self) -> str:
        return self.sink.run_dir

    @property
    def run_id(self) -> str:
        return self.sink.run_id

    def start(self) -> None:
        """Write the start record now: a process that dies before ``init_process_group``
        still leaves its trace file."""
        with self._lock:
            if self.sink.writer is None and not self.closed:
                self.sink.open_start_file(self.sig_lines)
                self.sink.writer.write([self.sink.header(self.rank), *self.clock_lines], None)

    def _new_files_state(self) -> None:
        """What a new set of files starts without: rows, spans, queued lines (definitions are kept)."""
        self.tracker = CompletionTracker(self.sig_bytes, self.sig_p2p, self.sig_cuda, self.record_error)
        self.spans: list[tuple] = []        # compute spans (add_span) not yet written
        self.meta_queue: list[dict] = []
        self.closed = False
        self._closing_thread: int | None = None   # the thread inside close(), while it is
        self._after_close: list = []              # what defer_until_closed put off
        self._before_end: list = []               # ... and what it runs before the end record
        self._end_queued = False
        self.end_line: dict | None = None         # the end record written, once it is

    def _after_fork_in_child(self) -> None:
        # The child keeps sig/group definitions (its wrappers still use those ids)
        # but writes its own files; buffered rows belong to the parent.
        # Its header's rank is null (it is not the rank's process), its files keep the rank's name.
        rank, started = self.rank, self.sink.writer is not None
        self.rank = None
        self._lock = threading.RLock()
        self.forget_other_threads()
        self.sink = self.sink.child()
        self._new_files_state()
        if self.native_log is not None:
            self.native_log.after_fork_in_child()
        if rank is not None:
            self._open(rank)
        elif started:
            self.start()

    def add_sig(self, key, desc: dict) -> int:
        with self._lock:
            sid = self.sig_ids.get(key)
            if sid is not None:
                return sid
            sid = len(self.sig_lines)
            cpu = bool(desc.pop("cpu", True))
            cuda_index = desc.pop("cuda_index", None)
            self._define(self.sig_lines, {"type": schema.META_SIG, "id": sid, **desc})
            self.sig_bytes.append(int(desc.get("bytes") or 0) + int(desc.get("out_bytes") or 0))
            self.sig_cpu.append(cpu)
            self.sig_p2p.append(desc.get("op") in schema.P2P_OPS)
            self.sig_cuda.append(None if cpu else cuda_index)
            self.sig_ids[key] = sid
            return sid

    def blocking_p2p_returned(self, t_call: int) -> None:
        """A blocking send/recv called at ``t_call`` on this thread has returned: its op ended."""
        thread, lines = threading.current_thread().name, self.sig_lines
        self.tracker.end_blocking_p2p(t_call, lambda sig: lines[sig].get("thread") == thread)

    def add_group(self, info: dict) -> int:
        with self._lock:
            gid = len(self.group_lines)
            self._define(self.group_lines, {"type": schema.META_GROUP, "id": gid, **info})
            return gid

    def add_world(self, info: dict) -> int:
        with self._lock:
            idx = len(self.world_lines)
            self._define(self.world_lines,
                         {"type": schema.META_WORLD, "world": idx, "t_mono_ns": time.monotonic_ns(), **info})
            first = self.rank is None
            if first:
                self.rank = int(info.get("rank", 0))
            if first or self.sink.writer is None:
                self._open(self.rank)
            return idx

    def add_span(self, phase: str, t_begin: int, t_end: int, step: int, label, grad: bool = True) -> None:
        """A compute span that just ended; ``label``: the module's label or the optimizer's class."""
        if self.closed:
            return  # stopped: nothing is written until a restart
        lid = schema.SPAN_NO_LABEL if label is None else self.label_ids.get(label)
        if lid is None:
            with self._lock:
                lid = self.label_ids.setdefault(label, len(self.label_ids))
                self._define(self.label_lines, {"type": schema.META_LABEL, "id": lid, "text": str(label)})
        flags = schema.SPAN_FLAG_GRAD if grad else 0
        self.spans.append((_SPAN_PHASE[phase], t_begin, t_end, step, self.iteration, lid, flags))

    def mark_clock(self, line: dict) -> None:
        with self._lock:
            self._define(self.clock_lines, {"type": schema.META_CLOCK, **line})

    def _define(self, lines: list, line: dict) -> None:
        """Keep a definition (every file re-states it) and queue it for the next flush."""
        lines.append(line)
        self.meta_queue.append(line)

    def add_meta(self, line: dict) -> bool:
        """Queue ``line``; False: dropped, the trace is closed (marks, errors, ... are not kept
        for a restart). Inside close, its own thread's lines go in until the end record."""
        with self._lock:
            if not self.closed or self._closing_thread == threading.get_ident() and not self._end_queued:
                self.meta_queue.append(line)
                return True
            return False

    def fail(self, row: list, exc: BaseException, tracker: CompletionTracker) -> None:
        """An op issued into ``tracker`` raised: not written once its session has ended (a restart's files)."""
        with self._lock:
            if tracker is self.tracker:
                self.record_error(row[T_CALL], row[GROUP], row[SEQ], row[SIG], f"{type(exc).__name__}: {exc}")

    def record_error(self, t_call: int, group: int, seq: int, sig: int, text: str) -> None:
        """An op raised, or its async work failed (also found by the final flush; C++ calls it)."""
        self._queue_op_line({"type": schema.META_ERROR, "t_call": t_call, "group": group, "seq": seq, "sig": sig,
                             "text": text})

    def record_source(self, t_call: int, group: int, seq: int, sig: int, src: int) -> None:
        """A recv from any source completed from ``src`` (its rank in the group; the sender is known only
        then: ``Work.source_rank()``): a ``source`` line with its global rank (C++ calls it too)."""
        ranks = self.group_lines[group].get("ranks") if 0 <= group < len(self.group_lines) else None
        if not isinstance(src, int) or src < 0 or not ranks or src >= len(ranks):
            return   # not known (-1: the backend could not tell)
        self._queue_op_line({"type": schema.META_SOURCE, "t_call": t_call, "group": group, "seq": seq, "sig": sig,
                             "src": ranks[src]})

    def _queue_op_line(self, line: dict) -> None:
        """Queue a line about one op (its error, its sender): while the trace is open, and in the final
        flush, which finds how the async ops still in flight ended (``add_meta`` keeps other lines out
        of it)."""
        with self._lock:
            if not self.closed or self._final_flush:
                self.meta_queue.append(line)

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

    def unfinished(self) -> list[tuple[list, str]]:
        """``CompletionTracker.unfinished``, with the native wrapper's."""
        out = self.tracker.unfinished()
        if self.native_log is not None:
            out += [tuple(x) for x in self.native_log.unfinished()]
        return out

    def _open(self, rank: int) -> None:
        if self.closed:
            return  # stopped (commtrace.stop): the next session's files re-state the definitions
        defs = [*self.world_lines, *self.group_lines, *self.sig_lines, *self.label_lines]
        if self.sink.open_rank_files(rank, self.sig_lines):
            # The start file becomes the rank's; a second header line adds the rank, torch version.
            pre = [self.sink.header(self.rank), *defs]
        else:  # a fresh file (a forked child) re-states every definition
            pre = [self.sink.header(self.rank), *self.clock_lines, *defs]
        queued = [m for m in self.meta_queue if m not in pre]
        self.meta_queue = pre + queued
        self.sink.start_flushing(self.flush)
        try:
            from . import fatal_signals   # not at the top: every traced process imports this module at start
            fatal_signals.arm(self)   # a fatal signal closes the trace before the process dies
        except Exception as exc:  # never let tracing break the job
            sys.stderr.write(f"commtrace: closing the trace on fatal signals disabled: {exc}\n")

    def flush(self, final: bool = False) -> None:
        with sigview.deferred(), self._lock:   # a KeyboardInterrupt on the main thread: after the write
            sink = self.sink
            if sink.writer is None:
                return
            before = None if sink.call_order is None or final else self._oldest_running_call()  # see there
            rows = self.tracker.collect(final)
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
            sink.write(meta, packed, spans, self.rank, final, before)

    def _oldest_running_call(self) -> int:
        """Ring mode (``bounded.CallOrder``): the call time of the oldest op still running,
        or now, taken before collecting. Ops older than ``IN_FLIGHT_AFTER_NS`` are written
        IN_FLIGHT and hold nothing back, so a hang delays no record longer than that."""
        now = time.monotonic_ns()
        young = [row[T_CALL] for row, _ in self.unfinished() if now - row[T_CALL] <= IN_FLIGHT_AFTER_NS]
        return min(young, default=now)

    def reopen(self, run_dir: str, run_id: str, launcher: str, command: list[str]) -> None:
        """A new session after ``close()``: new files (``...pid<P>.s<N>``) re-stating every
        definition and clock measurement."""
        with self._lock:
            if not self.closed:
                return
            self.sink = TraceSink(run_dir, run_id, launcher, command, self.sink.session + 1)
            self._new_files_state()
            self.exit_info = None
            if self.native_log is not None:
                self.native_log.set_paused(False)
            if self.rank is not None:
                self._open(self.rank)
            else:
                self.start()

    def _close_at_exit(self) -> None:
        try:
            if self._exit_closed:
                return
            traced = self.rank is not None and self.sink.writer is not None
            with sigview.deferred():   # the program's handlers (a timer left armed) run after, not inside
                if self.exit_info is None and not self.closed:
                    self.exit_info = self._exit_info_at_exit()
                self.close()
                self._exit_closed = True
                if traced:
                    time.sleep(EXIT_SETTLE_S)
        finally:
            sigview.release()      # commtrace run's hold from the script's end (runner)

    def _exit_info_at_exit(self) -> tuple[int, str] | None:
        """Not run by ``commtrace run``: how the process ends, where Python tells. The uncaught
        exception it printed is ``sys.last_value`` (exit code 1; a KeyboardInterrupt 130, as
        ``commtrace run`` says); a ``sys.exit`` ended it if its SystemExit was not caught; else
        unknown (``raise SystemExit``, the script's end)."""
        exc = getattr(sys, "last_value", None)
        if isinstance(exc, BaseException) and not isinstance(exc, SystemExit):
            self.record_exception(exc)
            return (130 if isinstance(exc, KeyboardInterrupt) else 1), "exception"
        exc = self.sys_exit
        if exc is None:
            return None
        # Caught: its traceback goes up to the catching frame. Uncaught: Python 3.11 attaches none,
        # 3.12+ one up to the outermost frame (as one caught at the script's top level).
        tb = exc.__traceback__
        if tb is not None and (sys.version_info < (3, 12) or tb.tb_frame.f_back is not None):
            return None
        return exit_status(exc.code), "exit"

    def close(self, exit_code: int | None = None, how: str = "exit") -> None:
        """Flush everything (ops still running as IN_FLIGHT); from here on the wrappers forward
        ops unrecorded until ``reopen``. Idempotent. A KeyboardInterrupt (SIGINT) arriving meanwhile
        is raised once everything is written."""
        with sigview.deferred(), self._lock:
            if self.closed:
                return
            self._closing_thread = threading.get_ident()
            self.closed = True
            try:
                self._write_end(exit_code, how)
            finally:
                self._closing_thread = None
                deferred, self._after_close = self._after_close, []
                for fn in deferred:
                    fn()

    def end_again(self, exit_code: int, how: str, lines: list[dict]) -> bool:
        """The process ends otherwise than the end record of its exit said (a SIGTERM arrived once
        it was written; it dies by it): ``lines`` and a new end record follow it in the meta file,
        the one readers take (the last). False, nothing written, where the trace ended otherwise
        (stopped, a signal, a hang: that record stays) or is not closed."""
        with self._lock:
            old = self.end_line
            if not self.closed or old is None or old["how"] in ("stop", "signal", "hang") or self.sink.writer is None:
                return False
            self.end_line = {"type": schema.META_END, "exit_code": exit_code, "how": how,
                             "t_wall_ns": time.time_ns(), "t_mono_ns": time.monotonic_ns()}
            self.sink.writer.append_after_close([*lines, self.end_line])
            return True

    def defer_until_closed(self, fn, before_end=None) -> bool:
        """If this thread is inside ``close`` (a signal handler interrupted it), run ``fn`` when
        that close has written everything and return True; else False. A handler that ended
        the process at once would leave the trace without its end record: a nested ``close``
        returns at once, the outer one never finishes. ``before_end()``, if close has not queued
        the end record yet, runs just before it does (it may add lines and flush, e.g. a dump)
        and returns the end record's (exit_code, how), or None for close's own."""
        if self._closing_thread != threading.get_ident():
            return False
        if before_end is not None and not self._end_queued:
            self._before_end.append(before_end)
        self._after_close.append(fn)
        return True

    def held_by_this_thread(self) -> bool:
        """Whether this thread is inside the recorder (a flush, a definition, close) now."""
        return self._lock._is_owned()

    def _write_end(self, exit_code: int | None, how: str) -> None:
        self.sink.stop.set()
        if self.native_log is not None:
            self.native_log.set_paused(True)
        try:
            if self.sink.writer is None:
                return
            if exit_code is None and self.exit_info is not None:
                exit_code, how = self.exit_info
            if how != "signal":   # a process a signal ends never finalizes its interpreter
                self.tracker.drain_callbacks(CALLBACK_DRAIN_S)
            while self._before_end:   # a signal that arrived inside this close (defer_until_closed)
                end = self._before_end.pop(0)()
                if end is not None:
                    exit_code, how = end
            self._end_queued = True
            end = {"type": schema.META_END, "exit_code": exit_code, "how": how,
                   "t_wall_ns": time.time_ns(), "t_mono_ns": time.monotonic_ns()}
            if how == "signal" and self.exit_info is not None:   # the script had ended: killed after it
                end["script_exit_code"] = self.exit_info[0]
            skip = torch_compat.distributed_test_skip(exit_code) if how == "exit" else None
            if skip is not None:
                end.update(how="skip", reason=skip)
            self.meta_queue.append(end)
            self.end_line = end
            self._final_flush = True  # errors of async ops it finds are still written
            self.flush(final=True)
            self.sink.writer.close()
        finally:
            self._final_flush = False
            if self.native_log is not None:  # its ops still running were written IN_FLIGHT here, and stay here
                self.native_log.end_session()
