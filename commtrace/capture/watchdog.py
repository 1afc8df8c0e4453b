"""Hang watchdog, signal dumps (JSON, never pickle), mp.spawn exceptions: docs/faults.md says
why the wakeup-fd thread dumps for a blocked main thread and why a hang ends in ``os._exit(3)``.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback

from ..trace import schema
from . import sigview, threads
from .completion import GROUP, SEQ, T_CALL, sig_of
from .scopes import drop_own_frame

ENV_HANG_TIMEOUT = "COMMTRACE_HANG_TIMEOUT"
ENV_ABORT_ON_HANG = "COMMTRACE_ABORT_ON_HANG"
ABORT_EXIT_CODE = 3
MAX_FRAMES = 64

_lock = threading.RLock()
_state: dict = {}


def in_flight_ops(rec, now_ns: int | None = None) -> list[dict]:
    """Ops not finished yet, oldest first: inside the backend call, or async and pending."""
    now = time.monotonic_ns() if now_ns is None else now_ns
    out = []
    for row, where in sorted(rec.unfinished(), key=lambda x: x[0][T_CALL]):
        sig = _line(rec.sig_lines, sig_of(row))   # -1: undescribed
        grp = _line(rec.group_lines, row[GROUP])
        out.append({
            "op": sig.get("op"), "variant": sig.get("variant"),
            "group": grp.get("name"), "group_desc": grp.get("desc"), "group_ranks": grp.get("ranks"),
            "seq": row[SEQ], "shapes": sig.get("shapes"), "dtype": sig.get("dtype"), "bytes": sig.get("bytes"),
            "reduce_op": sig.get("reduce_op"), "root": sig.get("root"), "callsite": sig.get("callsite"),
            "thread": sig.get("thread"), "state": where, "t_call_mono_ns": row[T_CALL],
            "age_s": round((now - row[T_CALL]) / 1e9, 3),
        })
    return out


def _line(lines, idx) -> dict:
    v = lines[idx] if 0 <= idx < len(lines) else None
    return v if isinstance(v, dict) else {}


def thread_stacks() -> list[dict]:
    """The Python stack of every thread (innermost frame last)."""
    names = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        t = names.get(ident)
        frames = [{"file": fs.filename, "line": fs.lineno, "function": fs.name, "code": fs.line}
                  for fs in traceback.extract_stack(frame)[-MAX_FRAMES:]]
        ours = threads.name_of(ident)  # commtrace's own threads are hidden from threading
        out.append({"name": t.name if t else ours or f"thread-{ident}", "ident": ident,
                    "daemon": bool(t.daemon) if t else (True if ours else None), "frames": frames})
    out.sort(key=lambda d: (d["name"] != "MainThread", d["name"]))
    return out


def dump(rec, reason: str, timeout_s: float | None = None, quiet: bool = False) -> str | None:
    """Write a state dump for ``reason`` ("hang", "SIGTERM", ...); returns its path. Never raises."""
    try:
        with _lock:
            return _dump(rec, reason, timeout_s, quiet)
    except Exception as exc:  # pragma: no cover - defensive
        with contextlib.suppress(Exception):
            sys.stderr.write(f"commtrace: dump failed: {exc}\n")
        return None


def _dump(rec, reason: str, timeout_s, quiet: bool) -> str | None:
    if rec is None or getattr(rec, "run_dir", None) is None:
        return None
    now = time.monotonic_ns()
    ops = in_flight_ops(rec, now)
    rank = rec.rank if rec.rank is not None else "X"
    base = f"{reason.lower()}.rank{rank}.pid{os.getpid()}"
    name, n = base + ".json", 1
    while os.path.exists(os.path.join(rec.run_dir, name)):
        n += 1
        name = f"{base}.{n}.json"
    path = os.path.join(rec.run_dir, name)
    doc = {
        "type": "commtrace_dump", "version": 1, "reason": reason, "rank": rec.rank, "pid": os.getpid(),
        "host": socket.gethostname(), "run_id": getattr(rec, "run_id", None),
        "t_mono_ns": now, "t_wall_ns": time.time_ns(), "hang_timeout_s": timeout_s,
        "in_flight": ops, "threads": thread_stacks(),
    }
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    os.replace(tmp, path)
    line = {"type": schema.META_DUMP, "path": name, "reason": reason, "t_mono_ns": now, "in_flight": len(ops)}
    if rec.add_meta(line):
        with contextlib.suppress(Exception):
            rec.flush()
    else:   # the trace has ended: listed if its end is written again (_end_by_sigterm)
        _state["unlisted"] = [line]
    if not quiet:
        what = "no op in flight"
        if ops:
            o = ops[0]
            what = f"{o['op']} (group {o['group']} seq {o['seq']}) in flight for {o['age_s']:.1f} s"
            if len(ops) > 1:
                what += f" (+{len(ops) - 1} more)"
        sys.stderr.write(f"commtrace: rank {rank} pid {os.getpid()}: {reason}: {what}; "
                         f"ops and stacks dumped to {path}\n")
        sys.stderr.flush()
    return path


class HangWatchdog:
    def __init__(self, rec, timeout_s: float, abort: bool):
        self.rec = rec
        self.timeout_ns = int(timeout_s * 1e9)
        self.timeout_s = timeout_s
        self.abort = abort
        self.interval = max(0.05, min(0.5, timeout_s / 4))
        self.in_episode = False
        self.dumps = 0
        self._stop = threading.Event()

    def start(self) -> None:
        self._stop.clear()
        threads.start(self._run, "commtrace-watchdog")

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> bool:
        """One check; returns True when it dumped (once per episode of ops over the timeout)."""
        if self.rec.closed:
            return False
        now = time.monotonic_ns()
        hung = any(now - row[T_CALL] > self.timeout_ns for row, _ in self.rec.unfinished())
        if not hung or self.in_episode:
            self.in_episode = hung
            return False
        self.in_episode = True
        self.dumps += 1
        dump(self.rec, "hang", timeout_s=self.timeout_s)
        if self.abort:
            sys.stderr.write(f"commtrace: --abort-on-hang: rank {self.rec.rank} exits with code {ABORT_EXIT_CODE}\n")
            sys.stderr.flush()
            try:
                self.rec.close(exit_code=ABORT_EXIT_CODE, how="hang")
            finally:
                os._exit(ABORT_EXIT_CODE)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.rec.closed:
                return
            try:
                self.tick()
            except Exception:  # never let tracing kill the job
                traceback.print_exc()


def _on_sigterm(signum, frame):
    """SIGTERM dumps, ends the trace (``how: "signal"``), then ends the process by SIGTERM as it
    would have; every route below ends so (``_end_by_sigterm``)."""
    rec = _state.get("rec")
    if rec is None:
        die_by(signum)
    # Arrived while the process, exiting already, closes its trace: that close dumps before its
    # end record (if it has not written it yet) and ends the process once everything is written.
    if rec.defer_until_closed(lambda: _end_by_sigterm(rec, signum),
                              before_end=lambda: _dump_before_end(rec, signum)):
        return
    # Arrived inside the recorder (a flush, a definition): a close here would re-enter it (inside
    # TraceWriter's lock: a deadlock; a flush's lines taken from the queue: never written).
    # Another thread closes once this one has left it.
    if rec.held_by_this_thread():
        threads.start(_end_by_sigterm, "commtrace-sigterm", rec, signum)
        return
    _end_by_sigterm(rec, signum)


def _dump_before_end(rec, signum: int) -> tuple[int, str]:
    dump_once(rec, "SIGTERM")
    return 128 + signum, "signal"


def _on_sigusr1(signum, frame):
    if sigview.wakeup_is_ours():
        return  # the signal thread dumps (it runs even when the main thread is blocked)
    # The program's wakeup fd (asyncio): the dump is this handler's. Arrived inside the recorder
    # (a flush: TraceWriter's lock held), another thread dumps once this one has left it.
    rec = _state.get("rec")
    if rec is not None and rec.held_by_this_thread():
        threads.start(dump, "commtrace-sigusr1", rec, "SIGUSR1")
        return
    dump(rec, "SIGUSR1")


def _signal_thread(rfd: int) -> None:
    while True:
        try:
            data = os.read(rfd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        for signum in data:
            try:
                _handle_signal_in_thread(signum)
            except Exception:
                traceback.print_exc()


def _handle_signal_in_thread(signum: int) -> None:
    deliveries = _state.setdefault("deliveries", {})
    deliveries[signum] = delivery = deliveries.get(signum, 0) + 1
    rec = _state.get("rec")
    if rec is None or sigview.runs(signum) >= delivery:
        return  # the program's own handler ran for this delivery (it may have put ours back since)
    if signum == signal.SIGUSR1 and sigview.real_getsignal(signal.SIGUSR1) is _on_sigusr1:
        dump(rec, "SIGUSR1")
    elif signum == signal.SIGTERM:
        if sigview.real_getsignal(signal.SIGTERM) is not _on_sigterm:
            return  # the program's own handler decides; the main thread will run it
        # The main thread may be stuck in C++ and never run the Python handler:
        # do what it would do, from here, after giving it a moment to do so itself.
        time.sleep(0.2)
        if sigview.runs(signum) >= delivery:
            return
        _end_by_sigterm(rec, signum)


def _end_by_sigterm(rec, signum: int) -> None:
    """What SIGTERM does, on any thread: dump (once), close the trace, die by the signal. A trace
    that its exit closed already (the signal arrived after its end record) ends again, by it."""
    dump_once(rec, "SIGTERM")
    rec.close(exit_code=128 + signum, how="signal")
    with contextlib.suppress(Exception):
        rec.end_again(128 + signum, "signal", _state.pop("unlisted", []))
    die_by(signal.SIGTERM)


def die_by(signum: int) -> None:
    """End the process by ``signum``'s default action, from any thread: only the main thread
    may change a Python handler (and it may be blocked in C++), so libc's is reset directly."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(int(signum), None)   # SIG_DFL
        os.kill(os.getpid(), signum)
        # Unblocked here, the default action ends every thread before kill returns; blocked,
        # exit as CPython does after a KeyboardInterrupt then (at once, 128 + signum).
        if signum not in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
            time.sleep(5)
    finally:
        os._exit(128 + int(signum))


def dump_once(rec, reason: str) -> str | None:
    """``dump`` unless this process already dumped for ``reason`` (SIGTERM: main handler vs thread)."""
    with _lock:
        done = _state.setdefault("dumped", set())
        if reason in done:
            return None
        done.add(reason)
    # A process without a rank says nothing on stderr: most are helpers (multiprocessing
    # Pool and DataLoader workers) whose parent terminates them routinely, silently untraced.
    return dump(rec, reason, quiet=getattr(rec, "rank", None) is None)


def _install_signals() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    # Only in place of the default action: a program's own handler keeps the signal (for
    # SIGTERM our flush thread and atexit still run). Invisible to the program (sigview).
    for signum, handler in ((signal.SIGTERM, _on_sigterm), (signal.SIGUSR1, _on_sigusr1)):
        with contextlib.suppress(ValueError, OSError):
            if sigview.real_getsignal(signum) in (signal.SIG_DFL, None):
                sigview.install(signum, handler)
    if not _state.get("signal_pipe"):
        _start_signal_thread()


def _start_signal_thread() -> None:
    """The thread that reads every signal's number from the wakeup fd (a pipe of ours)."""
    try:
        r, w = os.pipe()
        os.set_blocking(w, False)
        old = sigview.set_our_wakeup_fd(w)
        if old != -1:  # somebody else (asyncio) owns the wakeup fd: leave it
            sigview.real_set_wakeup_fd(old)
            os.close(r)
            os.close(w)
            return
    except (ValueError, OSError):
        return
    threads.start(_signal_thread, "commtrace-signals", r)
    _state["signal_pipe"] = (r, w)


# torch.multiprocessing.spawn children report their exception to the parent and sys.exit(1):
# the wrapped spawn._wrap also stores it in the trace, as ``commtrace run`` does for the script.
_orig_wrap = None


def _hook_spawn_exceptions() -> None:
    global _orig_wrap
    mod = sys.modules.get("torch.multiprocessing.spawn")
    orig = getattr(mod, "_wrap", None) if mod is not None else None
    if orig is None or orig is _spawn_wrap:
        return
    _orig_wrap = orig
    mod._wrap = _spawn_wrap  # module level: the parent pickles it by reference


def _spawn_wrap(fn, i, args, error_file):
    """torch.multiprocessing.spawn._wrap that also stores the child's exception in its trace."""
    orig = _orig_wrap
    if orig is None:  # this child has not imported torch yet (the script imports it lazily)
        import torch.multiprocessing.spawn  # noqa: F401
        mod = sys.modules["torch.multiprocessing.spawn"]  # the attribute of that name is the spawn function
        _hook_spawn_exceptions()
        orig = _orig_wrap or getattr(mod, "_wrap")   # never _spawn_wrap: the hook sets _orig_wrap first

    def traced(*a):
        rec = _state.get("rec")
        if rec is not None:
            with contextlib.suppress(Exception):
                rec.add_process_info(spawn_index=i)  # names the process if it dies before it has a rank
        try:
            return fn(*a)
        except Exception as exc:
            drop_own_frame(exc)  # torch formats the traceback the parent prints
            rec = _state.get("rec")
            if rec is not None:
                rec.record_exception(exc, exc.__traceback__)
                if rec.exit_info is None:
                    rec.exit_info = (1, "exception")
            raise
    return orig(traced, i, args, error_file)


def hang_timeout_from_env() -> float | None:
    try:
        v = float(os.environ.get(ENV_HANG_TIMEOUT, "") or 0)
    except ValueError:
        return None
    return v if v > 0 else None


def install(rec) -> None:
    """Signal dumps, the hang watchdog (``COMMTRACE_HANG_TIMEOUT``), mp.spawn exceptions. Idempotent."""
    with _lock:
        if _state.get("rec") is rec:
            return
        _state["rec"] = rec
    try:
        _install_signals()
    except Exception as exc:
        sys.stderr.write(f"commtrace: signal dumps disabled: {exc}\n")
    with contextlib.suppress(Exception):
        _hook_spawn_exceptions()
    if not _state.get("fork_hook"):
        _state["fork_hook"] = True
        os.register_at_fork(after_in_child=_after_fork_in_child)
    _start_watchdog(rec)


def _start_watchdog(rec, timeout=None, abort=None) -> bool:
    """Start the hang watchdog (settings from the environment unless given); False if none is set."""
    timeout = timeout or hang_timeout_from_env()
    if not timeout:
        return False
    abort = os.environ.get(ENV_ABORT_ON_HANG, "0") == "1" if abort is None else abort
    _state["watchdog"] = wd = HangWatchdog(rec, timeout, abort)
    wd.start()
    return True


def resume(rec) -> None:
    """After ``Recorder.reopen`` (``start()`` after ``stop()``): the watchdog ended with the previous
    session; start it again with the current settings. Signal dumps never stopped."""
    with _lock:
        old = _state.pop("watchdog", None)
        if old is not None:
            old.stop()
        if _state.get("rec") is not rec:
            return  # never installed for this recorder: install() does it all
    _start_watchdog(rec)


def _after_fork_in_child() -> None:
    # Threads do not survive fork: restart the watchdog for the child's own ops.
    global _lock
    _lock = threading.RLock()
    for key in ("dumped", "unlisted", "deliveries"):
        _state.pop(key, None)
    # The wakeup fd is the parent's pipe: the parent's signal thread would read this process's
    # signals as its own (a forked Pool worker's SIGTERM, from Pool.terminate: it ended the parent).
    with contextlib.suppress(ValueError, OSError):
        ours = sigview.after_fork_in_child()
        for fd in _state.pop("signal_pipe", ()):
            os.close(fd)
        if ours:
            _start_signal_thread()
    wd = _state.get("watchdog")
    if wd is not None:
        _start_watchdog(wd.rec, wd.timeout_s, wd.abort)
