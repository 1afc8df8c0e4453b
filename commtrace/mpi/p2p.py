"""The mpi backend's point-to-point ops (send, recv, recv from any source), as
methods of MPIProcessGroup (backend.py): always non-blocking (Isend/Irecv), their
Works completed by the progress thread or by whoever waits."""
from __future__ import annotations

from . import dtypes, runtime
from .tensors import _check, _one


class PointToPoint:
    """The point-to-point ops of MPIProcessGroup (a mixin: backend.py holds the state they use)."""

    def _check_tag(self, tag):
        if tag < 0 or tag > runtime.MPI.COMM_WORLD.Get_attr(runtime.MPI.TAG_UB):
            raise ValueError(f"mpi backend: tag {tag} outside MPI's range [0, "
                             f"{runtime.MPI.COMM_WORLD.Get_attr(runtime.MPI.TAG_UB)}]")

    def send(self, tensors, dst, tag=0):
        t = _one(tensors, "send")
        _check(t)
        self._check_rank(dst, "destination")
        self._check_tag(tag)
        return self._go(None, None, self._comm.Isend, (dtypes.buffer(t), dst, tag), [t])

    def recv(self, tensors, src, tag=0):
        t = _one(tensors, "recv")
        _check(t)
        self._check_rank(src, "source")
        self._check_tag(tag)
        return self._go(None, None, self._comm.Irecv, (dtypes.buffer(t), src, tag), [t], src=src)

    def recv_anysource(self, tensors, tag=0):
        t = _one(tensors, "recv_anysource")
        _check(t)
        self._check_tag(tag)
        return self._go(None, None, self._comm.Irecv, (dtypes.buffer(t), runtime.MPI.ANY_SOURCE, tag),
                        [t], status=runtime.MPI.Status())
