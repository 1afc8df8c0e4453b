"""A torch.distributed ProcessGroup built on mpi4py.

One instance per communicator: the world group gets a duplicate of
COMM_WORLD, every new_group its own communicator from MPI_Comm_create_group
(collective over the members only, so non-members never take part, matching
c10d, which never calls ``create`` on them).

Execution model (docs/mpi-backend.md has the measurements):
  * ``opts.asyncOp`` False (torch's Python API with async_op=False, which
    waits right after the call): the blocking MPI call runs inline and a
    finished Work is returned. Cheapest possible path.
  * otherwise (async_op=True, DDP's reducer, p2p): the non-blocking MPI call
    (Iallreduce, Ibcast, Isend, ...) is started and its request handed to the
    progress thread, which completes the Work and its torch future when MPI
    reports completion. ``Work.wait()`` takes the request back and MPI_Waits
    on it itself.

When the C++ fast path is built (commtrace/mpi/fastpath.py), c10d gets a
NativeMPIProcessGroup wrapping this group instead: it does blocking
all_reduce/broadcast of plain CPU tensors itself, in C++, on this group's
communicator, and hands every other call to this group unchanged.

Both call forms torch uses are accepted: a list of tensors plus an Options
object (what torch.distributed's Python functions and the tracer's forwarding
wrapper pass) and the older positional forms (tensor, op) / (tensors, root).
"""
from __future__ import annotations

import os
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from .. import mpienv
from ..dynamo import skip_class_frames
from . import dtypes
from .progress import Progress

_ReduceOp = dist.ReduceOp
_SUM = _ReduceOp.SUM
_AllreduceOptions = dist.AllreduceOptions
_SUM_OPS: dict = {}           # dtype -> (MPI.Op, avg) for SUM, the common case
# ReduceOp hashes by its RedOpType value (SUM = 0, PREMUL_SUM has its own); a
# hash compares in ~0.1 us where ReduceOp.__eq__'s pybind overloads take ~0.2.
_SUM_HASH = hash(_SUM)
_IN_PLACE = None
_U8 = torch.uint8
_state_lock = threading.Lock()    # guards Work._done/_fut hand-over between threads

_MPI = None
_progress = None


def _mpi():
    global _MPI, _progress, _IN_PLACE
    if _MPI is None:
        _MPI = mpienv.mpi_module()
        _IN_PLACE = _MPI.IN_PLACE
        _progress = Progress(_MPI)
        if _MPI.Query_thread() < _MPI.THREAD_MULTIPLE:
            # MPI was initialized elsewhere at a lower level: no second thread may
            # call MPI. Collectives then run blocking; p2p requests are completed by
            # whoever waits on them.
            _progress = None
        for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                   torch.int64):
            _SUM_OPS[dt] = dtypes.reduce_op(_SUM, dt)
    return _MPI


def cuda_aware() -> bool:
    """Whether MPI may be handed device pointers.

    mpi4py exposes no portable query; Open MPI's MPIX_Query_cuda_support is
    used when mpi4py provides it, and COMMTRACE_MPI_CUDA_AWARE=1 asserts it.
    """
    env = os.environ.get("COMMTRACE_MPI_CUDA_AWARE", "").lower()
    if env in ("1", "true", "yes"):
        return True
    if env in ("0", "false", "no"):
        return False
    q = getattr(_mpi(), "Query_cuda_support", None)
    try:
        return bool(q()) if q is not None else False
    except Exception:
        return False


def check_device(device, is_cuda_aware=None) -> None:
    """Raise a clear error for tensors MPI cannot read here."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return
    if dev.type == "cuda":
        if is_cuda_aware is None:
            is_cuda_aware = cuda_aware()
        if is_cuda_aware:
            return
        raise RuntimeError(
            f"mpi backend: tensor is on {dev} but the MPI library is not CUDA-aware; "
            "move it to CPU first, or use an MPI built with CUDA support "
            "(set COMMTRACE_MPI_CUDA_AWARE=1 if yours is and mpi4py cannot tell)")
    raise RuntimeError(f"mpi backend: tensors on device type '{dev.type}' are not supported")


# ---- Work ---------------------------------------------------------------------

class MPIWork(dist.Work):
    """Work for one MPI request (or none: already finished).

    Exactly one thread ever tests/waits the request: the progress thread while
    the work is in its active list, or the thread that stole it in wait().
    """

    # Defaults for finished works (see _DoneWork, which sets only _result).
    _done = True
    _exc = None
    _fut = None
    _src = -1
    _req = None

    def __init__(self, result, req=None, post=None, status=None, src=-1, keep=None):
        super().__init__()
        self._result = result
        self._keep = keep      # buffers MPI may still read/write: alive until done
        self._req = req
        self._post = post
        self._status = status
        self._src = src
        self._fut = None
        self._exc = None
        if req is None:
            self._done = True
        else:
            self._done = False
            self._gate = threading.Lock()
            self._gate.acquire()
            if _progress is not None:
                _progress.submit(self)

    # called once, by the owner of the request
    def _finish(self, exc):
        if exc is None and self._post is not None:
            try:
                self._post()
            except Exception as e:  # noqa: BLE001 -- surfaced through wait()
                exc = e
        if exc is None and self._status is not None:
            self._src = self._status.Get_source()
        self._keep = None
        if exc is not None and not isinstance(exc, RuntimeError):
            exc = RuntimeError(f"mpi backend: {type(exc).__name__}: {exc}")
        self._exc = exc
        with _state_lock:
            self._done = True
            fut = self._fut
        self._gate.release()
        if fut is not None:
            self._complete_future(fut)

    def _complete_future(self, fut):
        if self._exc is not None:
            fut.set_exception(self._exc)
        else:
            fut.set_result(self._result)

    def wait(self, timeout=None):
        if not self._done:
            secs = _seconds(timeout)
            if _progress is None or _progress.steal(self):
                self._wait_owned(secs)
            elif not self._gate.acquire(timeout=secs if secs else -1):
                raise RuntimeError(f"mpi backend: Work.wait timed out after {secs} s")
            else:
                self._gate.release()
        if self._exc is not None:
            raise self._exc
        return True

    def _wait_owned(self, secs):
        import time
        try:
            if not secs:
                self._req.Wait(self._status)
            else:
                deadline = time.monotonic() + secs
                while not self._req.Test(self._status):
                    if time.monotonic() > deadline:
                        if _progress is not None:
                            _progress.submit(self)   # give it back; it may still finish
                        raise RuntimeError(f"mpi backend: Work.wait timed out after {secs} s")
                    time.sleep(50e-6)
        except RuntimeError:
            raise
        except Exception as e:  # noqa: BLE001
            self._finish(e)
            return
        self._finish(None)

    def is_completed(self):
        if self._done:
            return True
        if _progress is None or _progress.steal(self):   # test now, not at the next poll
            try:
                flag = self._req.Test(self._status)
            except Exception as e:  # noqa: BLE001
                self._finish(e)
                return True
            if flag:
                self._finish(None)
                return True
            if _progress is not None:
                _progress.submit(self)
        return self._done

    def is_success(self):
        return self._done and self._exc is None

    def exception(self):
        return self._exc

    def get_future(self):
        """The work's one future (every caller -- DDP, the tracer, the user --
        gets the same object, as with c10d's own Work)."""
        if _progress is None and not self._done:
            self.wait()       # nobody else could complete it
        with _state_lock:
            fut = self._fut
            if fut is not None:
                return fut
            fut = self._fut = torch.futures.Future()
            if not self._done:
                return fut
        self._complete_future(fut)
        return fut

    def result(self):
        self.wait()
        return self._result

    def source_rank(self):
        self.wait()
        return self._src

    _source_rank = source_rank

    def synchronize(self):
        return None


class _DoneWork(MPIWork):
    """A Work that finished inside the call (asyncOp=False). No __init__: the
    pybind constructor plus one attribute is the cheapest Work torch accepts."""

    __init__ = dist.Work.__init__


class _MultiWork(dist.Work):
    """end_coalescing(): one Work over the works issued while coalescing."""

    def __init__(self, works):
        super().__init__()
        self._works = works

    def wait(self, timeout=None):
        for w in self._works:
            w.wait(timeout)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def get_future(self):
        if getattr(self, "_fut", None) is not None:
            return self._fut   # one future per work, whoever asks
        fut = self._fut = torch.futures.Future()
        futs = [w.get_future() for w in self._works]
        res = [t for w in self._works for t in w._result]
        if not futs:
            fut.set_result(res)
            return fut
        all_f = torch.futures.collect_all(futs)

        def done(f):
            try:
                f.value()
                for x in f.value():
                    x.value()
                fut.set_result(res)
            except Exception as e:  # noqa: BLE001
                fut.set_exception(e)
        all_f.add_done_callback(done)
        return fut

    def exception(self):
        for w in self._works:
            if w._exc is not None:
                return w._exc
        return None

    def result(self):
        self.wait()
        return [t for w in self._works for t in w._result]


def _scatter_back(flat, tensors, divide_by=None):
    """Copy consecutive slices of ``flat`` back into ``tensors`` (dividing for AVG)."""
    if divide_by:
        flat.div_(divide_by)
    off = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[off:off + n].view_as(t))
        off += n


def _seconds(timeout):
    if timeout is None:
        return 0
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


# ---- helpers ---------------------------------------------------------------------

def _one(tensors, what):
    if isinstance(tensors, torch.Tensor):
        return tensors
    if len(tensors) != 1:
        raise ValueError(f"mpi backend: {what} takes exactly one tensor per call, got {len(tensors)}")
    return tensors[0]


def _check(t):
    if not t.is_cpu:
        check_device(t.device)
    if not t.is_contiguous():
        raise ValueError("mpi backend: tensors must be contiguous")


def _bytes(t):
    """Flat uint8 view of a contiguous tensor."""
    return t.reshape(-1).view(_U8)


def _copy_bytes(dst, src_u8):
    if dst.is_contiguous():
        dst.reshape(-1).view(_U8).copy_(src_u8)
    else:
        tmp = torch.empty(dst.shape, dtype=dst.dtype)
        tmp.reshape(-1).view(_U8).copy_(src_u8)
        dst.copy_(tmp)


def _same_dtype(tensors, what):
    dt = tensors[0].dtype
    for t in tensors:
        if t.dtype != dt:
            raise ValueError(f"mpi backend: {what} needs one dtype, got {dt} and {t.dtype}")
    return dt


def _opt(opts, name, default):
    return getattr(opts, name, default) if opts is not None else default


def _async(opts):
    # Options objects carry asyncOp (default True); old positional forms pass none.
    return getattr(opts, "asyncOp", True)


def _redop(opts):
    if opts is None:
        return _SUM
    if isinstance(opts, (_ReduceOp, _ReduceOp.RedOpType)):
        return opts
    return opts.reduceOp


# ---- the process group ---------------------------------------------------------------

class MPIProcessGroup(dist.ProcessGroup):
    """torch ProcessGroup whose collectives are mpi4py calls on ``comm``."""

    def __init__(self, comm):
        _mpi()
        super().__init__(comm.Get_rank(), comm.Get_size())
        self._comm = comm
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        self._name = ""
        self._desc = ""
        self._coalescing = None
        self._small = (None, 0, 0, None)   # (tensor, data_ptr, numel, buffer) cache
        # The blocking SUM of the last small tensor: (tensor, data_ptr, numel,
        # buffer, MPI.Op, its finished Work). See allreduce.
        self._sum_fast = (None, 0, 0, None, None, None)

    # -- identity ------------------------------------------------------------
    def getBackendName(self):
        return "mpi"

    def name(self):
        return "mpi"

    def setGroupName(self, name):
        self._name = name

    def getGroupName(self):
        return self._name

    def setGroupDesc(self, desc):
        self._desc = desc

    def getGroupDesc(self):
        return self._desc

    @property
    def comm(self):
        """The mpi4py communicator (for users mixing mpi4py and torch)."""
        return self._comm

    def shutdown(self):
        c, self._comm = self._comm, None
        if c is not None:
            try:
                c.Free()
            except Exception:
                pass

    abort = shutdown

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

    def _done(self, result, post=None):
        if post is not None:
            post()
        w = _DoneWork()
        w._result = result
        if self._coalescing is not None:
            self._coalescing.append(w)
        return w

    def _go(self, opts, blocking, nonblocking, args, result, post=None, status=None, src=-1):
        """Run one MPI op blocking (asyncOp False) or non-blocking."""
        try:
            if blocking is not None and (_progress is None or not _async(opts)):
                blocking(*args)
                return self._done(result, post)
            req = nonblocking(*args)
        except Exception as e:  # MPI errors -> Python exception on this rank
            raise RuntimeError(f"mpi backend: {nonblocking.__name__} failed: {e}") from e
        w = MPIWork(result, req, post, status, src, args)
        if self._coalescing is not None:
            self._coalescing.append(w)
        return w

    def _avg_post(self, tensors, avg):
        if not avg:
            return None
        n = self._size

        def post():
            for t in tensors:
                t.div_(n)
        return post

    # -- all_reduce -----------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        # The hot path (1-element budget is a few microseconds): every line
        # here was measured; see docs/mpi-backend.md before adding to it.
        # Fastest: a blocking SUM on the same small tensor as the previous one
        # (a loss, a counter, a flag), guarded like _buf. Its Work is finished
        # and holds [t], so the same object serves every such call.
        f = self._sum_fast
        if (type(tensors) is list and len(tensors) == 1 and tensors[0] is f[0]
                and type(opts) is _AllreduceOptions and f[1] == f[0].data_ptr() and f[2] == f[0].numel()
                and hash(opts.reduceOp) == _SUM_HASH and (not opts.asyncOp or _progress is None)
                and self._coalescing is None):
            try:
                self._comm.Allreduce(_IN_PLACE, f[3], f[4])
            except Exception as e:
                raise RuntimeError(f"mpi backend: Allreduce failed: {e}") from e
            return f[5]
        t = tensors[0] if type(tensors) is list and len(tensors) == 1 else \
            (tensors if isinstance(tensors, torch.Tensor) else _one(tensors, "allreduce"))
        if type(opts) is _AllreduceOptions:
            rop = opts.reduceOp
            sync = not opts.asyncOp or _progress is None
        else:
            rop = _redop(opts)
            sync = _progress is None
        c = self._small
        if c[0] is t and c[1] == t.data_ptr() and c[2] == t.numel():
            buf = c[3]                  # validated when cached
        else:
            if not t.is_cpu or not t.is_contiguous():
                _check(t)
            buf = self._buf(t)
        if rop == _SUM:
            ent = _SUM_OPS.get(t.dtype) or dtypes.reduce_op(_SUM, t.dtype)
        else:
            ent = dtypes.reduce_op(rop, t.dtype)
        mop, avg = ent
        if sync:
            try:
                self._comm.Allreduce(_IN_PLACE, buf, mop)
            except Exception as e:
                raise RuntimeError(f"mpi backend: Allreduce failed: {e}") from e
            if avg:
                t.div_(self._size)
            w = _DoneWork()
            w._result = [t]
            if self._coalescing is not None:
                self._coalescing.append(w)
            elif rop == _SUM and self._small[0] is t:
                self._sum_fast = (t, t.data_ptr(), t.numel(), buf, mop, w)
            return w
        try:
            req = self._comm.Iallreduce(_IN_PLACE, buf, mop)
        except Exception as e:
            raise RuntimeError(f"mpi backend: Iallreduce failed: {e}") from e
        w = MPIWork([t], req, self._avg_post([t], avg) if avg else None)
        if self._coalescing is not None:
            self._coalescing.append(w)
        return w

    def allreduce_coalesced(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if not tensors:
            return self._done([])
        dt = _same_dtype(tensors, "allreduce_coalesced")
        for t in tensors:
            _check(t)
        mop, avg = dtypes.reduce_op(_redop(opts), dt)
        flat = torch.cat([t.reshape(-1) for t in tensors])

        def post():
            _scatter_back(flat, tensors, self._size if avg else None)
        return self._go(opts, self._comm.Allreduce, self._comm.Iallreduce,
                        (_MPI.IN_PLACE, dtypes.buffer(flat), mop), list(tensors), post)

    # -- broadcast / reduce ------------------------------------------------------------
    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        t = _one(tensors, "broadcast")
        _check(t)
        root = opts if isinstance(opts, int) else _opt(opts, "rootRank", 0)
        self._check_rank(root, "root")
        return self._go(opts if not isinstance(opts, int) else None,
                        self._comm.Bcast, self._comm.Ibcast, (self._buf(t), root), [t])

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        _check(t)
        root = _opt(opts, "rootRank", 0)
        self._check_rank(root, "root")
        mop, avg = dtypes.reduce_op(_redop(opts) if opts is not None else _SUM, t.dtype)
        buf = dtypes.buffer(t)
        if self._rank == root:
            args = (_MPI.IN_PLACE, buf, mop, root)
            post = self._avg_post([t], avg)
        else:
            args = (buf, None, mop, root)
            post = None
        return self._go(opts, self._comm.Reduce, self._comm.Ireduce, args, [t], post)

    # -- all_gather -----------------------------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "allgather")
        outs = output_tensors[0] if output_tensors and isinstance(output_tensors[0], (list, tuple)) \
            else output_tensors
        _check(t)
        self._check_list(outs, t, "allgather output")
        tmp = torch.empty((self._size,) + tuple(t.shape), dtype=t.dtype)

        def post():
            for i, o in enumerate(outs):
                o.copy_(tmp[i].view_as(o))
        return self._go(opts, self._comm.Allgather, self._comm.Iallgather,
                        (dtypes.buffer(t), dtypes.buffer(tmp)), list(outs), post)

    def _allgather_base(self, output, input, opts=None):
        _check(output)
        _check(input)
        if output.dtype != input.dtype:
            raise ValueError(f"mpi backend: all_gather_into_tensor dtypes differ: "
                             f"{output.dtype} vs {input.dtype}")
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"mpi backend: all_gather_into_tensor output has {output.numel()} "
                             f"elements, expected {self._size} x {input.numel()}")
        send = self._send_buffer(input, output, self._rank * input.numel())
        return self._go(opts, self._comm.Allgather, self._comm.Iallgather,
                        (send, dtypes.buffer(output)), [output])

    all_gather_single = _allgather_base
    all_gather_into_tensor = _allgather_base

    def _send_buffer(self, input, output, in_place_offset):
        # MPI forbids overlapping send/recv buffers: IN_PLACE when input is the
        # rank's own slot of output (FSDP-style), a copy for any other overlap.
        if input.numel() and input.untyped_storage().data_ptr() == output.untyped_storage().data_ptr():
            if input.data_ptr() == output.data_ptr() + in_place_offset * output.element_size():
                return _MPI.IN_PLACE
            input = input.clone()
        return dtypes.buffer(input)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        for t in input_list:
            _check(t)
        if len(output_lists) != self._size:
            raise ValueError(f"mpi backend: allgather_coalesced needs {self._size} output lists, "
                             f"got {len(output_lists)}")
        for outs in output_lists:
            if len(outs) != len(input_list):
                raise ValueError("mpi backend: allgather_coalesced output list length differs from input")
            for o, t in zip(outs, input_list):
                if o.numel() != t.numel() or o.dtype != t.dtype:
                    raise ValueError("mpi backend: allgather_coalesced output shape/dtype mismatch")
        send = torch.cat([_bytes(t) for t in input_list]) if input_list else torch.empty(0, dtype=_U8)
        recv = torch.empty((self._size, send.numel()), dtype=_U8)

        def post():
            for r, outs in enumerate(output_lists):
                off = 0
                for o in outs:
                    n = o.numel() * o.element_size()
                    _copy_bytes(o, recv[r, off:off + n])
                    off += n
        return self._go(opts, self._comm.Allgather, self._comm.Iallgather,
                        (dtypes.buffer(send), dtypes.buffer(recv)),
                        [o for outs in output_lists for o in outs], post)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        if len(outputs) != len(inputs):
            raise ValueError("mpi backend: allgather_into_tensor_coalesced needs as many outputs as inputs")
        for o, t in zip(outputs, inputs):
            _check(o)
            _check(t)
            if o.dtype != t.dtype or o.numel() != t.numel() * self._size:
                raise ValueError(f"mpi backend: all_gather_into_tensor output {tuple(o.shape)} "
                                 f"{o.dtype} does not fit {self._size} x input {tuple(t.shape)} {t.dtype}")
        send = torch.cat([_bytes(t) for t in inputs]) if inputs else torch.empty(0, dtype=_U8)
        recv = torch.empty((self._size, send.numel()), dtype=_U8)

        def post():
            off = 0
            for o, t in zip(outputs, inputs):
                n = t.numel() * t.element_size()
                _copy_bytes(o, recv[:, off:off + n].reshape(-1))
                off += n
        return self._go(opts, self._comm.Allgather, self._comm.Iallgather,
                        (dtypes.buffer(send), dtypes.buffer(recv)), list(outputs), post)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    # -- gather / scatter -------------------------------------------------------------------
    def gather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "gather")
        _check(t)
        root = _opt(opts, "rootRank", 0)
        self._check_rank(root, "root")
        if self._rank == root:
            outs = output_tensors[0] if output_tensors and isinstance(output_tensors[0], (list, tuple)) \
                else output_tensors
            self._check_list(outs, t, "gather output")
            tmp = torch.empty((self._size,) + tuple(t.shape), dtype=t.dtype)

            def post():
                for i, o in enumerate(outs):
                    o.copy_(tmp[i].view_as(o))
            args = (dtypes.buffer(t), dtypes.buffer(tmp), root)
            result = list(outs)
        else:
            if output_tensors and any(len(x) for x in output_tensors):
                raise ValueError("mpi backend: gather output list must be empty on non-root ranks")
            post, args, result = None, (dtypes.buffer(t), None, root), []
        return self._go(opts, self._comm.Gather, self._comm.Igather, args, result, post)

    def scatter(self, output_tensors, input_tensors, opts=None):
        t = _one(output_tensors, "scatter")
        _check(t)
        root = _opt(opts, "rootRank", 0)
        self._check_rank(root, "root")
        if self._rank == root:
            ins = input_tensors[0] if input_tensors and isinstance(input_tensors[0], (list, tuple)) \
                else input_tensors
            self._check_list(ins, t, "scatter input")
            send = torch.stack([x.reshape(t.shape) for x in ins]) if ins else None
            args = (dtypes.buffer(send), self._buf_out(t), root)
        else:
            if input_tensors and any(len(x) for x in input_tensors):
                raise ValueError("mpi backend: scatter input list must be empty on non-root ranks")
            args = (None, self._buf_out(t), root)
        return self._go(opts, self._comm.Scatter, self._comm.Iscatter, args, [t])

    def _buf_out(self, t):
        return dtypes.buffer(t)

    # -- reduce_scatter ---------------------------------------------------------------------
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter")
        ins = input_tensors[0] if input_tensors and isinstance(input_tensors[0], (list, tuple)) \
            else input_tensors
        _check(out)
        self._check_list(ins, out, "reduce_scatter input")
        mop, avg = dtypes.reduce_op(_redop(opts), out.dtype)
        send = torch.stack([x.reshape(out.shape) for x in ins])
        return self._go(opts, self._comm.Reduce_scatter_block, self._comm.Ireduce_scatter_block,
                        (dtypes.buffer(send), dtypes.buffer(out), mop), [out],
                        self._avg_post([out], avg))

    def _reduce_scatter_base(self, output, input, opts=None):
        _check(output)
        _check(input)
        if output.dtype != input.dtype:
            raise ValueError(f"mpi backend: reduce_scatter_tensor dtypes differ: {output.dtype} vs {input.dtype}")
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"mpi backend: reduce_scatter_tensor input has {input.numel()} elements, "
                             f"expected {self._size} x {output.numel()}")
        mop, avg = dtypes.reduce_op(_redop(opts), output.dtype)
        send = dtypes.buffer(input if input.untyped_storage().data_ptr()
                             != output.untyped_storage().data_ptr() else input.clone())
        return self._go(opts, self._comm.Reduce_scatter_block, self._comm.Ireduce_scatter_block,
                        (send, dtypes.buffer(output), mop), [output], self._avg_post([output], avg))

    reduce_scatter_single = _reduce_scatter_base
    reduce_scatter_tensor = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        if len(outputs) != len(inputs):
            raise ValueError("mpi backend: reduce_scatter_tensor_coalesced needs as many outputs as inputs")
        if not outputs:
            return self._done([])
        dt = _same_dtype(list(outputs) + list(inputs), "reduce_scatter_tensor_coalesced")
        for o, t in zip(outputs, inputs):
            _check(o)
            _check(t)
            if t.numel() != o.numel() * self._size:
                raise ValueError(f"mpi backend: reduce_scatter input {tuple(t.shape)} is not "
                                 f"{self._size} x output {tuple(o.shape)}")
        mop, avg = dtypes.reduce_op(_redop(opts), dt)
        send = torch.cat([t.reshape(self._size, -1) for t in inputs], dim=1).contiguous()
        recv = torch.empty(send.shape[1], dtype=dt)

        def post():
            _scatter_back(recv, outputs, self._size if avg else None)
        return self._go(opts, self._comm.Reduce_scatter_block, self._comm.Ireduce_scatter_block,
                        (dtypes.buffer(send), dtypes.buffer(recv), mop), list(outputs), post)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # -- all_to_all ------------------------------------------------------------------------
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _check(output)
        _check(input)
        if output.dtype != input.dtype:
            raise ValueError(f"mpi backend: all_to_all_single dtypes differ: {output.dtype} vs {input.dtype}")
        n = self._size
        if input.untyped_storage().data_ptr() == output.untyped_storage().data_ptr() and input.numel():
            input = input.clone()
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or output.numel() != input.numel():
                raise ValueError(f"mpi backend: all_to_all_single with equal splits needs numel "
                                 f"divisible by {n} and equal input/output sizes, got "
                                 f"{input.numel()} -> {output.numel()}")
            return self._go(opts, self._comm.Alltoall, self._comm.Ialltoall,
                            (dtypes.buffer(input), dtypes.buffer(output)), [output])
        scount, sdispl = self._splits(input, input_split_sizes, "input")
        rcount, rdispl = self._splits(output, output_split_sizes, "output")
        sb, st = dtypes.buffer(input)
        rb, rt = dtypes.buffer(output)
        return self._go(opts, self._comm.Alltoallv, self._comm.Ialltoallv,
                        ([sb, (scount, sdispl), st], [rb, (rcount, rdispl), rt]), [output])

    all_to_all_single = alltoall_base

    def _splits(self, t, splits, what):
        n = self._size
        dim0 = t.shape[0] if t.dim() else 1
        row = t.numel() // dim0 if dim0 else 0
        if not splits:
            if dim0 % n:
                raise ValueError(f"mpi backend: all_to_all_single {what} dim 0 ({dim0}) "
                                 f"is not divisible by world size {n}")
            splits = [dim0 // n] * n
        splits = list(splits)
        if len(splits) != n:
            raise ValueError(f"mpi backend: all_to_all_single {what} split sizes has "
                             f"{len(splits)} entries, group size is {n}")
        if any(s < 0 for s in splits) or sum(splits) != dim0:
            raise ValueError(f"mpi backend: all_to_all_single {what} split sizes {splits} "
                             f"do not add up to dim 0 ({dim0})")
        counts = [s * row for s in splits]
        displs = [0] * n
        for i in range(1, n):
            displs[i] = displs[i - 1] + counts[i - 1]
        return counts, displs

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self._size
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError(f"mpi backend: all_to_all needs {n} input and {n} output tensors, got "
                             f"{len(input_tensors)} and {len(output_tensors)}")
        for t in list(input_tensors) + list(output_tensors):
            if not t.is_cpu:
                check_device(t.device)
        send = torch.cat([_bytes(t.contiguous()) for t in input_tensors])
        scount = [t.numel() * t.element_size() for t in input_tensors]
        rcount = [t.numel() * t.element_size() for t in output_tensors]
        recv = torch.empty(sum(rcount), dtype=_U8)
        sdispl = [sum(scount[:i]) for i in range(n)]
        rdispl = [sum(rcount[:i]) for i in range(n)]
        B = _MPI.BYTE

        def post():
            for o, c, d in zip(output_tensors, rcount, rdispl):
                _copy_bytes(o, recv[d:d + c])
        return self._go(opts, self._comm.Alltoallv, self._comm.Ialltoallv,
                        ([send.numpy(), (scount, sdispl), B], [recv.numpy(), (rcount, rdispl), B]),
                        list(output_tensors), post)

    # -- barrier -----------------------------------------------------------------------------
    def barrier(self, opts=None):
        return self._go(opts, self._comm.Barrier, self._comm.Ibarrier, (), [])

    # -- point to point ----------------------------------------------------------------------------
    def _check_tag(self, tag):
        if tag < 0 or tag > _MPI.COMM_WORLD.Get_attr(_MPI.TAG_UB):
            raise ValueError(f"mpi backend: tag {tag} outside MPI's range [0, "
                             f"{_MPI.COMM_WORLD.Get_attr(_MPI.TAG_UB)}]")

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
        return self._go(None, None, self._comm.Irecv, (dtypes.buffer(t), _MPI.ANY_SOURCE, tag),
                        [t], status=_MPI.Status())

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
        _mpi()
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
skip_class_frames(MPIWork, _DoneWork, _MultiWork, MPIProcessGroup)
