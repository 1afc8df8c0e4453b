"""Clock offsets to rank 0 by ping-pong, the lowest round trip kept (README, "Clocks").

For a ping sent at ``t1`` and answered at ``t2`` (rank 0's clock) with the peer's
reading ``t_p``, ``offset = (t1 + t2) / 2 - t_p`` is off by at most half the round trip
(``t_rank0 = t_local + offset_ns``). Over a *link* with a deadline (a missing rank costs the
deadline, not a hang): MPI (``measure_mpi``, by ``commtrace run``: worlds without a store) or
a gloo group of commtrace's own, never registered with torch (``track_world``). Times include
a test-only shift (``trace.simhost``). The gloo group's store keys, under ``commtrace/clock/``:
``joins/<rank>`` (so worlds reusing a store get fresh keys), then under ``<size>/<n>/``:
``ref``, the counters ``elsewhere`` and ``arrived``, ``all``, and gloo's rendezvous under ``gloo/``.
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
from typing import Protocol

from .. import env_vars
from ..trace import simhost

PINGS = 8
_PING = (0,)


class Link(Protocol):
    def send(self, peer: int, values: tuple) -> bool: ...
    def recv(self, peer: int, n: int) -> list[int] | None: ...


def pingpong(link: Link, rank: int, size: int, pings: int = PINGS) -> dict | None:
    """This rank's ``{offset_ns, rtt_ns, t_mono_ns}`` (rank 0: zeros, and
    ``peers_failed``); None if it failed.

    Collective: every rank of ``size`` calls it. ``t_mono_ns`` is the process's
    own (unshifted) monotonic time of the kept ping. A peer that fails or
    times out does not stop rank 0 from measuring the others.
    """
    shift = simhost.shift_ns()
    now = time.monotonic_ns
    if rank == 0:
        failed = 0
        for peer in range(1, size):
            best = _best_ping(link, peer, pings, now, shift)
            if best is None or not link.send(peer, best):
                failed += 1
        return {"offset_ns": 0, "rtt_ns": 0, "t_mono_ns": now(), "peers_failed": failed}
    for _ in range(pings):
        if link.recv(0, 1) is None or not link.send(0, (now() + shift,)):
            return None
    res = link.recv(0, 3)
    if res is None:
        return None
    offset, rtt, t_peer = res
    return {"offset_ns": offset, "rtt_ns": rtt, "t_mono_ns": t_peer - shift}


def _best_ping(link: Link, peer: int, pings: int, now, shift: int) -> tuple | None:
    """(offset, rtt, peer's time) of the lowest-round-trip ping; None if the peer failed."""
    best = None
    for _ in range(pings):
        t1 = now()
        if not link.send(peer, _PING):
            return None
        reply = link.recv(peer, 1)
        t2 = now()
        if reply is None:
            return None
        rtt = t2 - t1
        if best is None or rtt < best[1]:
            best = ((t1 + t2) // 2 + shift - reply[0], rtt, reply[0])
    return best


# -- over MPI ------------------------------------------------------------------------

class MPILink:
    """Point-to-point over an mpi4py communicator, polled against a deadline."""

    TAG = 7331

    def __init__(self, comm, deadline_s: float):
        from mpi4py import MPI
        self.comm = comm
        self.byte = MPI.BYTE
        self.deadline = time.monotonic() + deadline_s

    def send(self, peer: int, values: tuple) -> bool:
        data = b"".join(int(v).to_bytes(8, "little", signed=True) for v in values)
        return self._wait(self.comm.Isend([data, len(data), self.byte], dest=peer, tag=self.TAG))

    def recv(self, peer: int, n: int) -> list[int] | None:
        buf = bytearray(8 * n)
        if not self._wait(self.comm.Irecv([buf, len(buf), self.byte], source=peer, tag=self.TAG)):
            return None
        return [int.from_bytes(buf[i:i + 8], "little", signed=True) for i in range(0, len(buf), 8)]

    def _wait(self, req) -> bool:
        while not req.Test():
            if time.monotonic() > self.deadline:
                with contextlib.suppress(Exception):
                    req.Cancel()
                return False
        return True


def measure_mpi(rec, comm, when: str, deadline_s: float) -> None:
    """Offsets over MPI's ``comm`` (collective; ``commtrace run``), a ``clock`` line of ``rec``
    (the recorder, or None: not tracing) if measured."""
    res = pingpong(MPILink(comm, deadline_s), comm.Get_rank(), comm.Get_size())
    if res is not None and rec is not None:
        rec.mark_clock({"ref_rank": 0, "offset_ns": res["offset_ns"], "rtt_ns": res["rtt_ns"],
                        "t_mono_ns": res["t_mono_ns"], "when": when, "method": "mpi-pingpong"})


# -- over a gloo group of commtrace's own ------------------------------------------------
KEY_PREFIX = "commtrace/clock/"
METHOD = "gloo-pingpong"
SAME_MACHINE = "same-host"  # the method of a rank that shares rank 0's CLOCK_MONOTONIC
# Every rank is inside init_process_group at the start: only a rank that never arrives
# takes this long. At exit a late rank costs its peers END_DEADLINE_S once.
START_DEADLINE_S = 30.0
END_DEADLINE_S = 2.0
_TAG = 0
_LAZY = "TORCH_GLOO_LAZY_INIT"


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
    """Equal for processes that share CLOCK_MONOTONIC: the boot id (else host name), and a
    test's simulated host (``trace.simhost``)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            ident = f.read().strip()
    except OSError:
        ident = socket.gethostname()
    sim = simhost.current()
    return ident if sim is None else f"{ident}/simulated:{sim.host}:{sim.shift_ns}"


class ClockGroup:
    """Rank 0 and the ranks on other machines: ``rank``/``size`` are within this group."""

    def __init__(self, pg, rank: int, size: int, world_id):
        self.pg, self.rank, self.size, self.world_id = pg, rank, size, world_id
        self.healthy = True

    @classmethod
    def join(cls, store, rank: int, size: int, world_id=None,
             timeout_s: float = START_DEADLINE_S) -> "ClockGroup | None":
        """Collective over the world. None on rank 0's machine (for rank 0 itself only when every
        rank is there). Raises if the store or the rendezvous fails."""
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
        # Connections made on first use: ping-pong connects rank 0 with each other rank only
        # (N - 1, not N(N - 1)/2). torch reads the switch at construction only.
        with env_vars.setting({_LAZY: "1"}):
            pg = ProcessGroupGloo(PrefixStore(base + "gloo/", store), index, members, timeout)
        return cls(pg, index, members, world_id)

    def measure(self, when: str, deadline_s: float) -> dict | None:
        """A ``clock`` meta line for this rank (collective), or None if it failed."""
        if not self.healthy:
            return None
        res = pingpong(GlooLink(self.pg, deadline_s), self.rank, self.size)
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
    """Measure this world's clock offsets now and again at exit (collective, right after the
    world is made); returns whether this rank's offset is known now. Never raises."""
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
    line = _measure(rec, group, "start", START_DEADLINE_S)
    with _lock:
        _tracked.append((rec, group))
    _hook_exit()
    return line is not None


def _in_process(store) -> bool:
    """No store, torch's placeholder, or a HashStore (its ranks share this process's clock)."""
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
    return sum(_measure(rec, group, when, deadline_s) is not None
               for rec, group in tracked if not getattr(rec, "closed", False))


def _measure(rec, group: ClockGroup, when: str, deadline_s: float) -> dict | None:
    try:
        line = group.measure(when, deadline_s)
    except Exception:
        return None
    if line is not None:
        rec.mark_clock(line)
    return line


def _at_exit() -> None:
    """The "end" measurement, unless the process is failing (its peers may be
    blocked in a collective with it and would only cost it the deadline)."""
    with _lock:
        if _exit["done"] or not _tracked:
            return
        _exit["done"] = True  # once: atexit and a multiprocessing finalizer may both call
    failing = any((getattr(rec, "exit_info", None) or (0,))[0] for rec, _ in _tracked)
    if not failing and getattr(sys, "last_value", None) is None:  # (or an uncaught exception was printed)
        measure_tracked("end")


def _hook_exit() -> None:
    """Run ``_at_exit`` before the recorder closes: atexit runs last-in first-out, and a forked
    multiprocessing child runs finalizers instead (the recorder's has exitpriority -1)."""
    with _lock:
        if _exit["hooked"]:
            return
        _exit["hooked"] = True
    atexit.register(_at_exit)
    import multiprocessing.util as mpu
    mpu.Finalize(None, _at_exit, exitpriority=0)


def _after_fork_in_child() -> None:
    """A forked child forgets the parent's worlds but keeps their groups (whose gloo threads do
    not exist in the child) alive."""
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _kept.extend(g for _, g in _tracked)
    _tracked.clear()
    _exit.update(hooked=False, done=False)


os.register_at_fork(after_in_child=_after_fork_in_child)
