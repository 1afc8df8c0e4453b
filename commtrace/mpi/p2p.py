"""The mpi backend's point-to-point ops (send, recv, recv from any source), as
methods of MPIProcessGroup (backend.py): always non-blocking (Isend/Irecv), their
Works completed by the progress thread or by whoever waits."""
from __future__ import annotations

from . import dtypes, runtime
from .tensors import _check, _one


class PointToPoint:
    """The point-to-point ops of MPIProcessGroup (a mixin: backend.py holds the state they use)."""

    def _p2p_buffer(self, tensors, what, tag, peer=None, peer_is="source"):
        """The checked tensor's MPI buffer (and the peer rank and tag checked)."""
        t = _one(tensors, what)
        _check(t)
        if peer is not None:
            self._check_rank(peer, peer_is)
        ub = runtime.MPI.COMM_WORLD.Get_attr(runtime.MPI.TAG_UB)
        if tag < 0 or tag > ub:
            raise ValueError(f"mpi backend: tag {tag} outside MPI's range [0, {ub}]")
        return t, dtypes.buffer(t)

    def send(self, tensors, dst, tag=0):
        t, buf = self._p2p_buffer(tensors, "send", tag, dst, "destination")
        return self._go(None, None, self._comm.Isend, (buf, dst, tag), [t])

    def recv(self, tensors, src, tag=0):
        t, buf = self._p2p_buffer(tensors, "recv", tag, src)
        return self._go(None, None, self._comm.Irecv, (buf, src, tag), [t], src=src)

    def recv_anysource(self, tensors, tag=0):
        t, buf = self._p2p_buffer(tensors, "recv_anysource", tag)
        return self._go(None, None, self._comm.Irecv, (buf, runtime.MPI.ANY_SOURCE, tag), [t],
                        status=runtime.MPI.Status())
