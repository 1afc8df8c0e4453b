"""A torch.distributed ProcessGroup built on mpi4py, one per communicator. docs/mpi-backend.md says
how c10d gets it and why each collective is one kind of MPI call on every rank whatever ``async_op``
says, issued in call order (``_collective``). With the C++ fast path built (fastpath.py), c10d gets
a NativeMPIProcessGroup over this group instead. Both call forms torch uses are accepted: tensor
lists plus an Options object, and the older positional (tensor, op) / (tensors, root).
"""
from __future__ import annotations

import contextlib

import torch.distributed as dist

from .. import mpienv, torch_compat
from ..dynamo import skip_class_frames
from . import dtypes, profiling, runtime
from .collectives import Collectives
from .profiling import profiler
from .tensors import check_device, cuda_aware  # noqa: F401  (check_device, cuda_aware: public here)
from .work import MPIWork, _DoneWork, _MultiWork, keep


# ---- the process group ---------------------------------------------------------------

class MPIProcessGroup(Collectives, dist.ProcessGroup):
    """torch ProcessGroup whose collectives are mpi4py calls on ``comm``."""

    def __init__(self, comm):
        runtime.init()
        super().__init__(comm.Get_rank(), comm.Get_size())
        self._comm = comm
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        self._name = ""
        self._desc = ""
        self._coalescing = None
        self._queue = runtime.CollectiveQueue()   # the order collectives reach MPI (all ranks alike)
        self._small = (None, 0, 0, None)   # (tensor, data_ptr, numel, buffer) cache
        # The blocking SUM of the last small tensor: (tensor, data_ptr, numel,
        # buffer, MPI.Op, its finished Work). See allreduce.
        self._sum_fast = (None, 0, 0, None, None, None)

    # -- identity ------------------------------------------------------------
    def getBackendName(self):
        return "mpi"

    name = getBackendName

    def setGroupName(self, name):
        self._name = name

    def getGroupName(self):
        return self._name

    def setGroupDesc(self, desc):
        self._desc = desc

    def getGroupDesc(self):
        return self._desc

    # Before torch 2.6 ProcessGroup's name and description are not virtual: C++ keeps
    # them in the group's backends, and this group registers none ("ProcessGroup name
    # not set" in destroy_process_group). c10d sets and reads them from Python, which
    # finds these; on later releases they agree with the C++ virtuals above.
    _set_group_name = setGroupName
    _set_group_desc = setGroupDesc
    group_name = property(getGroupName)
    group_desc = property(getGroupDesc)

    @property
    def comm(self):
        """The mpi4py communicator (for users mixing mpi4py and torch)."""
        return self._comm

    def shutdown(self):
        self._queue.close()
        c, self._comm = self._comm, None
        if c is not None:
            with contextlib.suppress(Exception):
                c.Free()

    abort = shutdown

    def _get_backend(self, device):
        """This group is its own backend: it registers no C++ one. From torch 2.15,
        batch_isend_irecv asks any group's backend whether it coalesces
        (``supports_coalescing``); this one does not, and its ops run one by one."""
        return self

    # Asked of the default group's backend (this group) by new_group on the releases
    # that can split a communicator (c10d's _get_split_source; torch 2.4 asks even
    # with no device bound): this one makes subgroups through its factory instead.
    supports_splitting = False

    # -- plumbing --------------------------------------------------------------
    def _buf(self, t):
        # A 1-element all_reduce spends ~0.4 us in t.numpy(); cache the view of
        # the last small tensor (identity + data_ptr + numel guard staleness).
        c = self._small
        if c[0] is t and c[1] == t.data_ptr() and c[2] == t.numel():
            return c[3]
        b = dtypes.buffer(t)
        if t.numel() <= 4096:
            self._small = (t, t.data_ptr(), t.numel(), b)
        return b

    def _done(self, result, post=None, event=None):
        if post is not None:
            post()
        if event is not None:
            event.end()
        w = _DoneWork()
        w._result = result
        keep(w)
        if self._coalescing is not None:
            self._coalescing.append(w)
        return w

    def _go(self, opts, name, args, result, post=None, status=None, src=-1, inputs=None):
        """Run collective ``name`` ("Allgather"), always as that blocking MPI call, inline
        (asyncOp False) or queued (``_collective``); "Isend" and "Irecv" start inline,
        completed by the progress thread or by whoever waits. Its profiler event has
        ``inputs`` (default: ``result``) as its inputs, as c10d's Work for it would."""
        event = None
        if profiler._is_profiler_enabled:
            event = profiling.begin(profiling.RECV_ANY if status is not None else profiling.TITLES[name],
                                    result if inputs is None else inputs)
        if name[0] != "I":
            # positional forms, and some Options types before torch 2.8, carry no asyncOp
            return self._collective(getattr(self._comm, name), args, result, post,
                                    runtime.progress is None or not torch_compat.async_op(opts), event)
        try:
            req = getattr(self._comm, name)(*args)
        except Exception as e:  # MPI errors -> Python exception on this rank
            raise RuntimeError(f"mpi backend: {name} failed: {e}") from e
        w = MPIWork(result, req, post, status, src, args, event=event)
        if self._coalescing is not None:
            self._coalescing.append(w)
        return w

    def _collective(self, call, args, result, post, blocking, event=None):
        """``call(*args)`` (a blocking MPI collective) in this communicator's order: at once on this
        thread when ``blocking`` and its turn is free (a finished Work), else queued for the worker
        (waited for here when ``blocking``). A non-blocking ``call`` ("Iallreduce": large
        all_reduces, see collectives.py) starts in its turn the same way, blocking or not, and its
        request goes to the progress thread. Without a progress thread (MPI below THREAD_MULTIPLE)
        no other thread may call MPI: always inline. ``event`` (profiling.py) ends when it finishes."""
        q = self._queue
        starts = call.__name__[0] == "I"    # a non-blocking call (large all_reduce): returns at once
        threaded = runtime.progress is not None
        claimed = threaded and (blocking or starts) and q.claim()
        if claimed or not threaded or (blocking and q.on_worker()):
            try:
                try:
                    req = call(*args)
                except Exception as e:  # MPI errors -> Python exception on this rank
                    raise RuntimeError(f"mpi backend: {call.__name__} failed: {e}") from e
                # A started call is noted as issued in its turn (its future's order).
                w = MPIWork(result, req, post, keep=args, event=event, order=q) if starts else None
            finally:
                if claimed:
                    q.turn.release()
            if not starts:
                return self._done(result, post, event)
        else:
            w = MPIWork(result, post=post, keep=args, call=(call, args), event=event)
            q.put(w)
        if self._coalescing is not None:
            self._coalescing.append(w)
        if blocking:
            w.wait()
        return w

    # -- coalescing --------------------------------------------------------------------------------
    # Ops start eagerly; a coalesced block just returns one Work over them all.
    def start_coalescing(self, device=None):
        if self._coalescing is not None:
            raise RuntimeError("mpi backend: start_coalescing called twice without end_coalescing")
        self._coalescing = []

    def end_coalescing(self, device=None):
        works, self._coalescing = self._coalescing or [], None
        return _MultiWork(works)

    _start_coalescing = start_coalescing
    _end_coalescing = end_coalescing

    # -- checks ------------------------------------------------------------------------------------
    def _check_rank(self, r, what):
        if not 0 <= r < self._size:
            raise ValueError(f"mpi backend: {what} rank {r} is outside the group (size {self._size})")

    def _check_list(self, tensors, like, what):
        if len(tensors) != self._size:
            raise ValueError(f"mpi backend: {what} needs {self._size} tensors (group size), "
                             f"got {len(tensors)}")
        for x in tensors:
            if x.numel() != like.numel() or x.dtype != like.dtype:
                raise ValueError(f"mpi backend: {what} tensor {tuple(x.shape)} {x.dtype} does not "
                                 f"match {tuple(like.shape)} {like.dtype}")
            if not x.is_cpu:
                check_device(x.device)


# ---- what c10d calls ------------------------------------------------------------------------

_CREATE_TAG = 0x6D7069   # same on every member; creations are sequential per process


class ProcessGroupMPIFactory:
    """Stands in for torch's C++ ProcessGroupMPI: c10d only calls ``create``."""

    @staticmethod
    def create(ranks=None):
        world = mpienv.world()
        runtime.init()
        if not ranks:
            comm = world.Dup()
        else:
            ranks = list(ranks)
            if world.Get_rank() not in ranks:
                return None
            comm = world.Create_group(world.Get_group().Incl(ranks), _CREATE_TAG)
        # The C++ fast path wraps the group when its extension is built and usable.
        from .fastpath import wrap

        return wrap(MPIProcessGroup(comm))


# C++ (DDP's reducer, functional collectives) calls these back inside torch.compile'd code.
skip_class_frames(MPIWork, _DoneWork, _MultiWork, MPIProcessGroup, Collectives)
