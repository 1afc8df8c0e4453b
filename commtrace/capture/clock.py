"""Clock offsets to rank 0, measured over MPI by ping-pong (lowest round trip kept).

Returns ``offset_ns`` such that ``t_rank0 = t_local + offset_ns`` for
``time.monotonic_ns`` clocks. Runs on MPI's COMM_WORLD before the user's script
starts (and again at a clean exit), never on a user process group.
"""
from __future__ import annotations

import time

PINGS = 8


def measure(comm, pings: int = PINGS, deadline_s: float = 5.0) -> dict:
    """Ping-pong between rank 0 and every other rank; collective over ``comm``.

    Uses non-blocking calls with a deadline so a rank that never arrives (it
    crashed) costs ``deadline_s`` instead of a hang.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    now = time.monotonic_ns
    if size == 1:
        return {"offset_ns": 0, "rtt_ns": 0, "t_mono_ns": now(), "ok": True}
    buf = bytearray(8)
    deadline = time.monotonic() + deadline_s

    def wait(req) -> bool:
        while not req.Test():
            if time.monotonic() > deadline:
                try:
                    req.Cancel()
                except Exception:
                    pass
                return False
        return True

    tag = 7331
    if rank == 0:
        for peer in range(1, size):
            best = None
            for _ in range(pings):
                t1 = now()
                if not wait(comm.Isend([t1.to_bytes(8, "little", signed=True), 8, _byte()], dest=peer, tag=tag)):
                    return {"ok": False}
                if not wait(comm.Irecv([buf, 8, _byte()], source=peer, tag=tag)):
                    return {"ok": False}
                t2 = now()
                tp = int.from_bytes(buf, "little", signed=True)
                rtt = t2 - t1
                if best is None or rtt < best[1]:
                    best = ((t1 + t2) // 2 - tp, rtt)
            # Tell the peer its offset (it is the one that records it).
            msg = best[0].to_bytes(8, "little", signed=True) + best[1].to_bytes(8, "little", signed=True)
            if not wait(comm.Isend([msg, 16, _byte()], dest=peer, tag=tag + 1)):
                return {"ok": False}
        return {"offset_ns": 0, "rtt_ns": 0, "t_mono_ns": now(), "ok": True}
    for _ in range(pings):
        if not wait(comm.Irecv([buf, 8, _byte()], source=0, tag=tag)):
            return {"ok": False}
        t = now()
        if not wait(comm.Isend([t.to_bytes(8, "little", signed=True), 8, _byte()], dest=0, tag=tag)):
            return {"ok": False}
    res = bytearray(16)
    if not wait(comm.Irecv([res, 16, _byte()], source=0, tag=tag + 1)):
        return {"ok": False}
    return {"offset_ns": int.from_bytes(res[:8], "little", signed=True),
            "rtt_ns": int.from_bytes(res[8:], "little", signed=True), "t_mono_ns": now(), "ok": True}


def _byte():
    from mpi4py import MPI
    return MPI.BYTE
