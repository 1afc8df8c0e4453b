"""Clock offsets to rank 0 by ping-pong, the lowest round trip kept.

For a ping sent at ``t1`` and answered at ``t2`` (rank 0's clock) with the peer's
reading ``t_p``, ``offset = (t1 + t2) / 2 - t_p`` is off by at most half the round trip;
of ``PINGS`` pings the lowest round trip is kept, and rank 0 tells the peer
(``t_rank0 = t_local + offset_ns``). Over a *link* with a deadline (a missing rank costs
the deadline, not a hang): MPI (``measure``) or commtrace's gloo group (``clock_group``).
Times include a test-only shift (``trace.simhost``).
"""
from __future__ import annotations

import time
from typing import Protocol

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
                try:
                    req.Cancel()
                except Exception:
                    pass
                return False
        return True


def measure(comm, pings: int = PINGS, deadline_s: float = 5.0) -> dict:
    """Offsets over MPI's ``comm`` (collective); ``ok`` False if it failed."""
    res = pingpong(MPILink(comm, deadline_s), comm.Get_rank(), comm.Get_size(), pings)
    return {"ok": False} if res is None else {**res, "ok": True}
