"""The files one tracing session of one process writes, and the thread that flushes into them.

Files start as ``proc.<host>.pid<P>`` (a process that dies before its first group still
leaves its header), become ``rank<R>.pid<P>`` at its first group; a restarted session adds
``.s<N>``. Flushed every ``FLUSH_INTERVAL_S``: an op that ended a second before a SIGKILL is on disk.
"""
from __future__ import annotations

import copy
import os
import sys
import threading
import time

from .. import __version__
from ..trace import schema
from ..trace.writer import TraceWriter

FLUSH_INTERVAL_S = 0.5
# The variables launchers set to tell a process who it is and how to meet the others,
# recorded in the header. A fixed list, never the whole environment: it may hold secrets.
LAUNCH_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALRANKID",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_ID",
)


class TraceSink:
    """Where a session's records go: run directory, file names, header, bounded selection."""

    def __init__(self, run_dir: str, run_id: str, launcher: str, command: list[str], session: int):
        self.run_dir, self.run_id, self.launcher, self.command = run_dir, run_id, launcher, command
        self.session = session
        # capture.bounded.Options, or None: every op written. Read by each session
        # (commtrace.start may set new ones); a forked child keeps its parent's.
        self.bounded = _bounded_options()
        self._new_process_state()

    def _new_process_state(self) -> None:
        """A new process's state (this session's, or a forked child's): its pid, its start, no files."""
        self.pid = os.getpid()
        # When tracing started in this process (the header's t_wall_ns, t_mono_ns): read together,
        # a pair of one moment (trace.clocks aligns hosts by their difference). A forked child's
        # is its fork: its parent's would make worlds forked one after another look equally old.
        self.t_wall0, self.t_mono0 = time.time_ns(), time.monotonic_ns()
        self.writer: TraceWriter | None = None
        self.coverage = None                # capture.bounded.Coverage of the current files (bounded mode)
        self.call_order = None              # capture.bounded.CallOrder of the current files (ring mode)
        self.stop = threading.Event()       # set: the flush thread ends at its next wake-up

    def child(self) -> TraceSink:
        """The same session's sink for a forked child (its own files, under its pid, its own start)."""
        out = copy.copy(self)
        out._new_process_state()
        return out

    def header(self, rank) -> dict:
        env = os.environ
        torch = sys.modules.get("torch")  # never imported here: a process that does not use torch stays so
        return {
            "type": schema.META_HEADER, "format": schema.FORMAT_NAME, "version": schema.FORMAT_VERSION,
            "source": "python", "record_size": schema.RECORD_SIZE,
            "commtrace_version": __version__, "torch_version": getattr(torch, "__version__", None),
            "host": hostname(), "pid": self.pid, "ppid": os.getppid(), "rank": rank,
            "launcher": self.launcher, "launch_env": {k: env[k] for k in LAUNCH_VARS if k in env},
            "run_id": self.run_id, "command": self.command, "argv": list(sys.argv),
            "python": sys.version.split()[0], "cwd": os.getcwd(),
            "t_wall_ns": self.t_wall0, "t_mono_ns": self.t_mono0,
            "t_wall_open_ns": time.time_ns(), "t_mono_open_ns": time.monotonic_ns(),
            "session": self.session, "bounded": None if self.bounded is None else self.bounded.describe(),
        }

    def _stem(self, prefix: str) -> str:
        return f"{prefix}.pid{self.pid}" + (f".s{self.session}" if self.session > 1 else "")

    def _new_writer(self, stem: str, sig_lines: list) -> None:
        opts = self.bounded
        self.writer = TraceWriter(self.run_dir, stem, keep_last=opts.keep_last if opts is not None else None)
        if opts is not None:
            from .bounded import CallOrder, Coverage
            self.coverage = Coverage(opts, sig_lines)
            self.call_order = CallOrder() if opts.keep_last else None

    def open_start_file(self, sig_lines: list) -> None:
        """The ``proc.`` meta file, before the process has a rank. Its name has the host's (processes
        on two hosts may share a pid), in characters a file name may hold."""
        host = "".join(c if c.isalnum() or c == "-" else "_" for c in hostname().split(".")[0])[:64]
        self._new_writer(self._stem(f"proc.{host or 'host'}"), sig_lines)

    def open_rank_files(self, rank: int, sig_lines: list) -> bool:
        """The rank's files; True if they continue the start file (renamed), False if new."""
        stem = self._stem(f"rank{rank}")
        renamed = self.writer is not None
        if renamed:
            self.writer.rename(stem)
        else:
            self._new_writer(stem, sig_lines)
        self.writer.open_ops()
        return renamed

    def start_flushing(self, flush) -> None:
        """Call ``flush()`` every FLUSH_INTERVAL_S on a hidden thread until ``stop`` is set."""
        from . import threads

        def run():
            while not self.stop.wait(FLUSH_INTERVAL_S):
                try:
                    flush()
                except Exception:  # never let tracing kill the user's job
                    import traceback  # not at the top: every traced process imports this module at start
                    traceback.print_exc()
        threads.start(run, "commtrace-flush")  # hidden from threading.enumerate()

    def write(self, meta: list, packed, spans, rank, final: bool, before) -> None:
        """One flush's lines and records; ``before``: ring mode's bound on call times."""
        if self.call_order is not None:
            packed = self.call_order.release(packed, None if final else before)
        cov = self.coverage
        if cov is not None:
            packed, spans = cov.select(packed, spans)
        self.writer.write(meta, packed, spans)
        if cov is not None and rank is not None and (cov.changed or final):
            self.writer.write_coverage(cov.state(self.writer))


def _bounded_options():
    """The bounded-mode options in the environment, or None (ValueError: tracing is off)."""
    if not (os.environ.get(schema.ENV_KEEP_LAST) or os.environ.get(schema.ENV_STEPS)):
        return None  # the usual case: nothing more to import at start
    from .bounded import options_from_env
    return options_from_env(os.environ)


def hostname() -> str:
    """socket.gethostname() without importing socket (every traced process imports this at start)."""
    try:
        return os.uname().nodename
    except AttributeError:  # no uname (Windows)
        import socket
        return socket.gethostname()
