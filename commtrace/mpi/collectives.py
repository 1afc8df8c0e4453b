"""The mpi backend's ops, as methods of MPIProcessGroup (backend.py: ``_go`` and ``_collective``
issue them; docs/mpi-backend.md, "Order of collectives")."""
from __future__ import annotations

import itertools

import torch
import torch.distributed as dist

from .. import torch_compat
from . import dtypes, profiling, runtime
from .profiling import profiler
from .tensors import (_U8, _bytes, _check, _copy_bytes, _one, _opt, _redop, _same_dtype, _scatter_back,
                      check_device)
from .work import _DoneWork, keep

_SUM = dist.ReduceOp.SUM
_AllreduceOptions = dist.AllreduceOptions
_AR_ASYNC_OP = torch_compat.has_async_op(_AllreduceOptions)  # torch < 2.8: the caller's intent is unknown
# ReduceOp hashes by its RedOpType value (SUM = 0, PREMUL_SUM has its own); a
# hash compares in ~0.1 us where ReduceOp.__eq__'s pybind overloads take ~0.2.
_SUM_HASH = hash(_SUM)


def _flat(tensors):
    """A tensor list as torch passes it: [[t0, t1, ...]] (one per device) or [t0, t1, ...]."""
    return tensors[0] if tensors and isinstance(tensors[0], (list, tuple)) else tensors


class Collectives:
    """The ops of MPIProcessGroup (a mixin: backend.py holds the state they use)."""

    # An all_reduce of more bytes than this is MPI_Iallreduce on every rank (its size is the
    # same on every rank, so they agree), blocking caller or not: DDP's buckets overlap
    # backward instead of spinning on the worker (docs/mpi-backend.md says why 256). The C++
    # fast path reads it (native_mpi.cpp).
    IALLREDUCE_ABOVE_BYTES = 256

    def _avg_post(self, tensors, avg):
        if not avg:
            return None
        n = self._size

        def post():
            for t in tensors:
                t.div_(n)
        return post

    def _root(self, opts):
        root = _opt(opts, "rootRank", 0)
        self._check_rank(root, "root")
        return root

    def _pair(self, output, input, what):
        _check(output)
        _check(input)
        if output.dtype != input.dtype:
            raise ValueError(f"mpi backend: {what} dtypes differ: {output.dtype} vs {input.dtype}")

    def _gathered(self, outs, t):
        """(a [size, *t.shape] receive buffer, the copy of its rows into ``outs``)."""
        tmp = torch.empty((self._size,) + tuple(t.shape), dtype=t.dtype)

        def post():
            for i, o in enumerate(outs):
                o.copy_(tmp[i].view_as(o))
        return tmp, post

    # -- all_reduce -----------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        # The hot path (1-element budget is a few microseconds): every line here was measured; see
        # docs/mpi-backend.md before adding to it. Fastest: a blocking SUM on the same small tensor
        # as the previous one (a loss, a counter, a flag), guarded like _buf. Its Work is finished
        # and holds [t], so the same object serves every such call. Inline only in this
        # communicator's turn (nothing queued or running: runtime.CollectiveQueue).
        f = self._sum_fast
        q = self._queue
        if (type(tensors) is list and len(tensors) == 1 and tensors[0] is f[0]
                and type(opts) is _AllreduceOptions and f[1] == f[0].data_ptr() and f[2] == f[0].numel()
                and hash(opts.reduceOp) == _SUM_HASH and ((_AR_ASYNC_OP and not opts.asyncOp) or runtime.progress is None)
                and self._coalescing is None and not profiler._is_profiler_enabled and q.claim()):
            try:
                self._comm.Allreduce(runtime.IN_PLACE, f[3], f[4])
            except Exception as e:
                raise RuntimeError(f"mpi backend: Allreduce failed: {e}") from e
            finally:
                q.turn.release()
            return f[5]
        t = tensors[0] if type(tensors) is list and len(tensors) == 1 else \
            (tensors if isinstance(tensors, torch.Tensor) else _one(tensors, "allreduce"))
        if type(opts) is _AllreduceOptions:
            rop = opts.reduceOp
            sync = (_AR_ASYNC_OP and not opts.asyncOp) or runtime.progress is None
        else:
            rop = _redop(opts)
            sync = runtime.progress is None
        c = self._small
        if c[0] is t and c[1] == t.data_ptr() and c[2] == t.numel():
            buf = c[3]                  # validated when cached
        else:
            if not t.is_cpu or not t.is_contiguous():
                _check(t)
            buf = self._buf(t)
        if rop == _SUM:
            ent = runtime.SUM_OPS.get(t.dtype) or dtypes.reduce_op(_SUM, t.dtype)
        else:
            ent = dtypes.reduce_op(rop, t.dtype)
        mop, avg = ent
        event = profiling.begin("mpi:all_reduce", [t]) if profiler._is_profiler_enabled else None
        if t.nbytes > self.IALLREDUCE_ABOVE_BYTES:
            return self._collective(self._comm.Iallreduce, (runtime.IN_PLACE, buf, mop), [t],
                                    self._avg_post([t], avg) if avg else None, sync, event)
        if sync and q.claim():
            try:
                self._comm.Allreduce(runtime.IN_PLACE, buf, mop)
            except Exception as e:
                raise RuntimeError(f"mpi backend: Allreduce failed: {e}") from e
            finally:
                q.turn.release()
            if avg:
                t.div_(self._size)
            if event is not None:
                event.end()
            w = _DoneWork()
            w._result = [t]
            keep(w)
            if self._coalescing is not None:
                self._coalescing.append(w)
            elif rop == _SUM and self._small[0] is t:
                self._sum_fast = (t, t.data_ptr(), t.numel(), buf, mop, w)
            return w
        return self._collective(self._comm.Allreduce, (runtime.IN_PLACE, buf, mop), [t],
                                self._avg_post([t], avg) if avg else None, sync, event)

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
        return self._go(opts, "Allreduce",
                        (runtime.MPI.IN_PLACE, dtypes.buffer(flat), mop), list(tensors), post)

    # -- broadcast / reduce ------------------------------------------------------------
    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        _check(t)
        root = opts if isinstance(opts, int) else _opt(opts, "rootRank", 0)
        self._check_rank(root, "root")
        return self._go(opts if not isinstance(opts, int) else None, "Bcast", (self._buf(t), root), [t])

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        _check(t)
        root = self._root(opts)
        mop, avg = dtypes.reduce_op(_redop(opts) if opts is not None else _SUM, t.dtype)
        buf = dtypes.buffer(t)
        if self._rank == root:
            return self._go(opts, "Reduce", (runtime.MPI.IN_PLACE, buf, mop, root), [t], self._avg_post([t], avg))
        return self._go(opts, "Reduce", (buf, None, mop, root), [t])

    # -- all_gather -----------------------------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "allgather")
        outs = _flat(output_tensors)
        _check(t)
        self._check_list(outs, t, "allgather output")
        tmp, post = self._gathered(outs, t)
        return self._go(opts, "Allgather", (dtypes.buffer(t), dtypes.buffer(tmp)), list(outs), post, inputs=[t])

    def _allgather_base(self, output, input, opts=None):
        self._pair(output, input, "all_gather_into_tensor")
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"mpi backend: all_gather_into_tensor output has {output.numel()} "
                             f"elements, expected {self._size} x {input.numel()}")
        send = self._send_buffer(input, output, self._rank * input.numel())
        return self._go(opts, "Allgather", (send, dtypes.buffer(output)), [output], inputs=[input])

    all_gather_single = _allgather_base
    all_gather_into_tensor = _allgather_base

    def _send_buffer(self, input, output, in_place_offset):
        # MPI forbids overlapping send/recv buffers: IN_PLACE when input is the
        # rank's own slot of output (FSDP-style), a copy for any other overlap.
        if input.numel() and input.untyped_storage().data_ptr() == output.untyped_storage().data_ptr():
            if input.data_ptr() == output.data_ptr() + in_place_offset * output.element_size():
                return runtime.MPI.IN_PLACE
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
        send, recv = self._byte_rows(input_list)

        def post():
            for r, outs in enumerate(output_lists):
                off = 0
                for o in outs:
                    n = o.numel() * o.element_size()
                    _copy_bytes(o, recv[r, off:off + n])
                    off += n
        return self._go(opts, "Allgather",
                        (dtypes.buffer(send), dtypes.buffer(recv)),
                        [o for outs in output_lists for o in outs], post, inputs=input_list)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        if len(outputs) != len(inputs):
            raise ValueError("mpi backend: allgather_into_tensor_coalesced needs as many outputs as inputs")
        for o, t in zip(outputs, inputs):
            _check(o)
            _check(t)
            if o.dtype != t.dtype or o.numel() != t.numel() * self._size:
                raise ValueError(f"mpi backend: all_gather_into_tensor output {tuple(o.shape)} "
                                 f"{o.dtype} does not fit {self._size} x input {tuple(t.shape)} {t.dtype}")
        send, recv = self._byte_rows(inputs)

        def post():
            off = 0
            for o, t in zip(outputs, inputs):
                n = t.numel() * t.element_size()
                _copy_bytes(o, recv[:, off:off + n].reshape(-1))
                off += n
        return self._go(opts, "Allgather", (dtypes.buffer(send), dtypes.buffer(recv)), list(outputs), post,
                        inputs=inputs)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def _byte_rows(self, inputs):
        """(the bytes of ``inputs`` end to end, a receive buffer of one such row per rank)."""
        send = torch.cat([_bytes(t) for t in inputs]) if inputs else torch.empty(0, dtype=_U8)
        return send, torch.empty((self._size, send.numel()), dtype=_U8)

    # -- gather / scatter -------------------------------------------------------------------
    def gather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "gather")
        _check(t)
        root = self._root(opts)
        if self._rank == root:
            outs = _flat(output_tensors)
            self._check_list(outs, t, "gather output")
            tmp, post = self._gathered(outs, t)
            return self._go(opts, "Gather", (dtypes.buffer(t), dtypes.buffer(tmp), root), list(outs), post,
                            inputs=[t])
        if output_tensors and any(len(x) for x in output_tensors):
            raise ValueError("mpi backend: gather output list must be empty on non-root ranks")
        return self._go(opts, "Gather", (dtypes.buffer(t), None, root), [], inputs=[t])

    def gather_single(self, output, input, opts=None):
        """torch 2.15's gather_single / gather_into_tensor: every rank's ``input`` end to end in the
        root's ``output`` (the other ranks pass an empty one)."""
        _check(input)
        root = self._root(opts)
        if self._rank != root:
            return self._go(opts, "Gather", (dtypes.buffer(input), None, root), [], inputs=[input])
        self._pair(output, input, "gather_into_tensor")
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"mpi backend: gather_into_tensor output has {output.numel()} "
                             f"elements, expected {self._size} x {input.numel()}")
        send = self._send_buffer(input, output, self._rank * input.numel())
        return self._go(opts, "Gather", (send, dtypes.buffer(output), root), [output], inputs=[input])

    def scatter(self, output_tensors, input_tensors, opts=None):
        t = _one(output_tensors, "scatter")
        _check(t)
        root = self._root(opts)
        if self._rank == root:
            ins = _flat(input_tensors)
            self._check_list(ins, t, "scatter input")
            send = dtypes.buffer(torch.stack([x.reshape(t.shape) for x in ins])) if ins else None
        else:
            ins = []     # the event's inputs: the root's list only (torch's)
            if input_tensors and any(len(x) for x in input_tensors):
                raise ValueError("mpi backend: scatter input list must be empty on non-root ranks")
            send = None
        return self._go(opts, "Scatter", (send, dtypes.buffer(t), root), [t], inputs=ins)

    # -- reduce_scatter ---------------------------------------------------------------------
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter")
        ins = _flat(input_tensors)
        _check(out)
        self._check_list(ins, out, "reduce_scatter input")
        mop, avg = dtypes.reduce_op(_redop(opts), out.dtype)
        send = torch.stack([x.reshape(out.shape) for x in ins])
        return self._go(opts, "Reduce_scatter_block",
                        (dtypes.buffer(send), dtypes.buffer(out), mop), [out],
                        self._avg_post([out], avg), inputs=ins)

    def _reduce_scatter_base(self, output, input, opts=None):
        self._pair(output, input, "reduce_scatter_tensor")
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"mpi backend: reduce_scatter_tensor input has {input.numel()} elements, "
                             f"expected {self._size} x {output.numel()}")
        mop, avg = dtypes.reduce_op(_redop(opts), output.dtype)
        send = dtypes.buffer(input if input.untyped_storage().data_ptr()
                             != output.untyped_storage().data_ptr() else input.clone())
        return self._go(opts, "Reduce_scatter_block",
                        (send, dtypes.buffer(output), mop), [output], self._avg_post([output], avg),
                        inputs=[input])

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
        return self._go(opts, "Reduce_scatter_block",
                        (dtypes.buffer(send), dtypes.buffer(recv), mop), list(outputs), post, inputs=inputs)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # -- all_to_all ------------------------------------------------------------------------
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        self._pair(output, input, "all_to_all_single")
        n = self._size
        if input.untyped_storage().data_ptr() == output.untyped_storage().data_ptr() and input.numel():
            input = input.clone()
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or output.numel() != input.numel():
                raise ValueError(f"mpi backend: all_to_all_single with equal splits needs numel "
                                 f"divisible by {n} and equal input/output sizes, got "
                                 f"{input.numel()} -> {output.numel()}")
            return self._go(opts, "Alltoall", (dtypes.buffer(input), dtypes.buffer(output)), [output],
                            inputs=[input])
        scount, sdispl = self._splits(input, input_split_sizes, "input")
        rcount, rdispl = self._splits(output, output_split_sizes, "output")
        sb, st = dtypes.buffer(input)
        rb, rt = dtypes.buffer(output)
        return self._go(opts, "Alltoallv", ([sb, (scount, sdispl), st], [rb, (rcount, rdispl), rt]), [output],
                        inputs=[input])

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
        return counts, [0, *itertools.accumulate(counts[:-1])]

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
        B = runtime.MPI.BYTE

        def post():
            for o, c, d in zip(output_tensors, rcount, rdispl):
                _copy_bytes(o, recv[d:d + c])
        return self._go(opts, "Alltoallv",
                        ([send.numpy(), (scount, sdispl), B], [recv.numpy(), (rcount, rdispl), B]),
                        list(output_tensors), post, inputs=input_tensors)

    # -- barrier -----------------------------------------------------------------------------
    def barrier(self, opts=None):
        return self._go(opts, "Barrier", (), [])

    # -- point to point ----------------------------------------------------------------------
    def _p2p_buffer(self, tensors, what, tag, peer=None, peer_is="source"):
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
        return self._go(None, "Isend", (buf, dst, tag), [t])

    def recv(self, tensors, src, tag=0):
        t, buf = self._p2p_buffer(tensors, "recv", tag, src)
        return self._go(None, "Irecv", (buf, src, tag), [t], src=src)

    def recv_anysource(self, tensors, tag=0):
        t, buf = self._p2p_buffer(tensors, "recv_anysource", tag)
        return self._go(None, "Irecv", (buf, runtime.MPI.ANY_SOURCE, tag), [t], status=runtime.MPI.Status())
