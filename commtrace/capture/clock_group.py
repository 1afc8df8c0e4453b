"""Clock offsets on every launcher, over a gloo group of commtrace's own.

When a world (default process group) with a store is created, its ranks find
out through that world's own store which of them run on rank 0's machine
(same kernel boot id: they share its CLOCK_MONOTONIC, nothing to measure).
Rank 0 and the ranks elsewhere join a private gloo group built directly from
torch's C++ bindings over a ``PrefixStore`` of the world's store, and run
``clock.pingpong`` on it ("start"); the group is kept and the ping-pong runs
again when the process exits ("end"), so the reader can fit the drift between
the two. torch never registers the group: no ``_world`` entry, no group
counter, name or sequence number of the user's changes, and nothing is ever
called on the user's groups. A one-machine job builds no group at all. Worlds
without a store (the mpi4py backend) are measured over MPI by ``commtrace
run`` instead.

Store keys, all under the world store's ``commtrace/clock/`` prefix:
``joins/<rank>`` (how many times this rank did this on this store, so worlds
that reuse a store get fresh keys), then under ``<size>/<n>/``: ``ref`` (rank
0's machine), ``elsewhere`` and ``arrived`` (counters), ``all`` (every rank has
arrived) and gloo's own rendezvous keys under ``gloo/``.

``track_world`` is the entry point for anything that has a world's store, rank
and size (the process-group hook; a later ``commtrace.start()``), and
``measure_tracked`` measures every tracked world again (at exit; ``stop()``).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
import threading
import time
from datetime import timedelta

from ..trace import simhost
from . import clock

KEY_PREFIX = "commtrace/clock/"
METHOD = "gloo-pingpong"
SAME_MACHINE = "same-host"  # the method of a rank that shares rank 0's CLOCK_MONOTONIC
# Every rank is inside init_process_group when the group is joined, so the
# rendezvous and the ping-pong normally take milliseconds; the deadline only
# bounds a rank that never arrives.
START_DEADLINE_S = 30.0
# At exit ranks arrive when they finish; one that has not arrived within this
# costs its peers this long once, and the run keeps its start measurement.
END_DEADLINE_S = 2.0
_TAG = 0


class GlooLink:
    """``clock.Link`` over a ProcessGroupGloo's send/recv, with a deadline."""

    def __init__(self, pg, deadline_s: float):
        import torch
        self.pg = pg
        self.deadline = time.monotonic() + deadline_s
        self._bufs = {n: torch.zeros(n, dtype=torch.int64) for n in (1, 3)}

    def send(self, peer: int, values: tuple) -> bool:
        buf = self._bufs[len(values)]
        for i, v in enumerate(values):
            buf[i] = v
        return self._wait(lambda: self.pg.send([buf], peer, _TAG))

    def recv(self, peer: int, n: int) -> list[int] | None:
        buf = self._bufs[n]
        return buf.tolist() if self._wait(lambda: self.pg.recv([buf], peer, _TAG)) else None

    def _wait(self, issue) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            issue().wait(timedelta(seconds=left))
            return True
        except Exception:  # timed out, or the peer's connection closed
            return False


def clock_identity() -> str:
    """Equal for processes that share CLOCK_MONOTONIC: the kernel's boot id
    (containers on one machine share it; the host name where there is none),
    and the simulated host of a test (``trace.simhost``), which is another machine."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            ident = f.read().strip()
    except OSError:
        ident = socket.gethostname()
    sim = simhost.current()
    return ident if sim is None else f"{ident}/simulated:{sim.host}:{sim.shift_ns}"


@contextlib.contextmanager
def _connect_lazily():
    """Build the gloo group with connections made on first use: ping-pong only
    ever connects rank 0 with each other rank (N - 1 connections, not the full
    mesh's N(N - 1)/2: 2016 at 64 ranks, most of the start-up cost there). torch
    reads the switch from the environment when the group is constructed, so it
    is set for that moment only (inside init_process_group)."""
    key = "TORCH_GLOO_LAZY_INIT"
    saved = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


class ClockGroup:
    """Rank 0 and the ranks on other machines than its: a private gloo group,
    used for ping-pong only (``rank``/``size`` are within this group)."""

    def __init__(self, pg, rank: int, size: int, world_id):
        self.pg, self.rank, self.size, self.world_id = pg, rank, size, world_id
        self.healthy = True

    @classmethod
    def join(cls, store, rank: int, size: int, world_id=None,
             timeout_s: float = START_DEADLINE_S) -> "ClockGroup | None":
        """Collective over the world's ranks (``rank`` of ``size``). None for a
        rank on rank 0's machine, and for rank 0 when every rank is on it.
        Raises if the store or the rendezvous fails."""
        from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo
        timeout = timedelta(seconds=timeout_s)
        base = f"{KEY_PREFIX}{size}/{store.add(f'{KEY_PREFIX}joins/{rank}', 1)}/"
        me = clock_identity()
        if rank == 0:
            store.set(base + "ref", me)
        else:
            store.wait([base + "ref"], timeout)
        elsewhere = rank != 0 and store.get(base + "ref").decode("utf-8", "replace") != me
        index = store.add(base + "elsewhere", 1) if elsewhere else 0
        if store.add(base + "arrived", 1) == size:
            store.set(base + "all", "1")
        if rank != 0 and not elsewhere:
            return None
        store.wait([base + "all"], timeout)
        members = 1 + store.add(base + "elsewhere", 0)
        if members == 1:
            return None
        with _connect_lazily():
            pg = ProcessGroupGloo(PrefixStore(base + "gloo/", store), index, members, timeout)
        return cls(pg, index, members, world_id)

    def measure(self, when: str, deadline_s: float) -> dict | None:
        """A ``clock`` meta line for this rank (collective), or None if it failed."""
        if not self.healthy:
            return None
        res = clock.pingpong(GlooLink(self.pg, deadline_s), self.rank, self.size)
        if res is None or res.get("peers_failed"):
            self.healthy = False  # a timed-out exchange leaves the group's state unknown
        if res is None:
            return None
        return {"ref_rank": 0, **res, "when": when, "method": METHOD, "world_id": self.world_id}


_lock = threading.Lock()
_tracked: list[tuple[object, ClockGroup]] = []   # (recorder, group) per world this process is in
_kept: list[ClockGroup] = []                     # groups never destroyed (see _after_fork_in_child)
_exit = {"hooked": False, "done": False}


# Backends whose ranks share one process (fake, threaded: one clock) or that
# have no store (mpi: measured over MPI by ``commtrace run``).
_SKIPPED_BACKENDS = {"fake", "threaded", "mpi"}


def track_world(rec, store, rank: int, size: int, world_id=None, backend: str | None = None) -> bool:
    """Measure this world's clock offsets now and again at exit; lines go to ``rec``.

    Collective over the world (every rank calls it right after the world is
    made). Returns whether this rank's offset is known now (measured, or it
    shares rank 0's machine). Never raises.
    """
    if size < 2 or str(backend).lower() in _SKIPPED_BACKENDS or _in_process(store):
        return False
    try:
        group = ClockGroup.join(store, rank, size, world_id)
    except Exception as exc:
        sys.stderr.write(f"commtrace: clock offsets not measured ({type(exc).__name__}: {exc})\n")
        return False
    if group is None:
        if rank != 0:  # on rank 0's machine: the reader takes offset 0 as exact
            rec.mark_clock({"ref_rank": 0, "offset_ns": 0, "rtt_ns": 0, "t_mono_ns": time.monotonic_ns(),
                            "when": "start", "method": SAME_MACHINE, "world_id": world_id})
        return True
    try:
        line = group.measure("start", START_DEADLINE_S)
    except Exception:
        line = None
    if line is not None:
        rec.mark_clock(line)
    with _lock:
        _tracked.append((rec, group))
    _hook_exit()
    return line is not None


def _in_process(store) -> bool:
    """No store, torch's placeholder, or one that lives in this process only
    (HashStore: every rank it serves shares this process's clock)."""
    if store is None:
        return True
    try:
        from torch._C._distributed_c10d import HashStore, PrefixStore, Store
        while isinstance(store, PrefixStore):
            store = store.underlying_store
        return type(store) is Store or isinstance(store, HashStore)
    except Exception:
        return True


def measure_tracked(when: str, deadline_s: float = END_DEADLINE_S) -> int:
    """Measure every tracked world again (collective per world); returns lines recorded."""
    with _lock:
        tracked = list(_tracked)
    n = 0
    for rec, group in tracked:
        if getattr(rec, "closed", False):
            continue
        try:
            line = group.measure(when, deadline_s)
        except Exception:
            line = None
        if line is not None:
            rec.mark_clock(line)
            n += 1
    return n


def _at_exit() -> None:
    """The "end" measurement, unless the process is failing (its peers may be
    blocked in a collective with it and would only cost it the deadline)."""
    with _lock:
        if _exit["done"] or not _tracked:
            return
        _exit["done"] = True  # once: atexit and a multiprocessing finalizer may both call
    if not _failing():
        measure_tracked("end")


def _failing() -> bool:
    for rec, _ in _tracked:
        info = getattr(rec, "exit_info", None)
        if info and info[0]:
            return True
    return getattr(sys, "last_value", None) is not None  # an uncaught exception was printed


def _hook_exit() -> None:
    """Run ``_at_exit`` before the recorder closes: atexit handlers run last-in
    first-out, and a fork-started multiprocessing child skips atexit but runs
    finalizers (the recorder's close has exitpriority -1)."""
    with _lock:
        if _exit["hooked"]:
            return
        _exit["hooked"] = True
    atexit.register(_at_exit)
    import multiprocessing.util as mpu
    mpu.Finalize(None, _at_exit, exitpriority=0)


def _after_fork_in_child() -> None:
    """A forked child is in none of the parent's worlds: it forgets them, but
    keeps their groups alive (their gloo threads do not exist in the child)."""
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _kept.extend(g for _, g in _tracked)
    _tracked.clear()
    _exit.update(hooked=False, done=False)


os.register_at_fork(after_in_child=_after_fork_in_child)
