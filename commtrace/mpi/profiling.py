"""torch profiler events of the mpi backend's ops: one ``mpi:<op>`` event per op, titled as torch's
ProcessGroupMPI titles its Works, started when the op is issued and ended when it completes (C++
backends start it in ``c10d::Work``'s constructor and end it in ``Work::finish``).

With the C++ fast path in use (fastpath.py sets ``native``) every event is made there as c10d's Work
makes it: marked async, with its input shapes. Without it, torch's Python record-function calls make
it: input shapes too, but async (``is_async``) only when it ends on another thread than it began
(the group's worker or progress thread): Python cannot mark an event async.
"""
from __future__ import annotations

import torch

# profiler._is_profiler_enabled: whether a torch profiler is on. The ops read this Python flag (one
# attribute read) and do nothing more while it is False.
profiler = torch.autograd.profiler
_enter = torch.autograd._record_function_with_args_enter
_end_on = torch.ops.profiler._call_end_callbacks_on_jit_fut

# Title by the MPI call an op makes. torch's ProcessGroupMPI titles; for what it lacks (reduce_scatter,
# all_gather_into_tensor, the *_coalesced forms) the title of the collective the op is a form of.
TITLES = {
    "Allreduce": "mpi:all_reduce", "Iallreduce": "mpi:all_reduce", "Bcast": "mpi:broadcast",
    "Reduce": "mpi:reduce", "Allgather": "mpi:all_gather", "Gather": "mpi:gather",
    "Scatter": "mpi:scatter", "Reduce_scatter_block": "mpi:reduce_scatter",
    "Alltoall": "mpi:all_to_all", "Alltoallv": "mpi:all_to_all", "Barrier": "mpi:barrier",
    "Isend": "mpi:send", "Irecv": "mpi:recv",
}
RECV_ANY = "mpi:recvAnySource"

native = None   # the fast path's extension (its OpEvent), once a group uses it


def begin(title: str, inputs):
    """The event of an op issued now, with ``inputs`` (tensors) as its inputs; ``end()`` it once."""
    if native is not None:
        return native.OpEvent(title, list(inputs))
    return _PyEvent(title, inputs)


class _PyEvent:
    """torch's Python record function, ended through a future so that the end callbacks run with the
    issuing thread's profiler state on whatever thread completes the op (as ``Work::finish`` does)."""

    __slots__ = ("_fut",)

    def __init__(self, title, inputs):
        self._fut = torch.futures.Future()
        _end_on(_enter(title, *inputs), self._fut)

    def end(self):
        self._fut.set_result(None)
