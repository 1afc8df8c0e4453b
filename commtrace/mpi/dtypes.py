"""torch dtype -> MPI buffer, torch ReduceOp -> MPI.Op.

Buffers are zero-copy numpy views of the tensor's storage handed to mpi4py as ``[array, MPI
datatype]``. Types MPI lacks travel as same-sized integers: float16/bfloat16 as uint16,
float8 as bytes, complex32 as uint32. Reductions on float16/bfloat16 use user-defined
MPI.Ops that compute in float32 and round back to the 16-bit type after each pairwise step,
as gloo (c10::Half / c10::BFloat16 operators) does: results are bit-identical.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from .. import mpienv

RedOpType = dist.ReduceOp.RedOpType

# kind: what reductions a dtype admits.
_INT, _FLOAT, _COMPLEX, _BOOL, _HALF, _BF16, _OPAQUE = range(7)

# torch dtype -> (torch dtype to view as before .numpy() or None, MPI type name, kind)
_TABLE = {
    torch.float32: (None, "FLOAT", _FLOAT),
    torch.float64: (None, "DOUBLE", _FLOAT),
    torch.float16: (torch.int16, "UINT16_T", _HALF),
    torch.bfloat16: (torch.int16, "UINT16_T", _BF16),
    torch.int8: (None, "INT8_T", _INT),
    torch.uint8: (None, "UINT8_T", _INT),
    torch.int16: (None, "INT16_T", _INT),
    torch.int32: (None, "INT32_T", _INT),
    torch.int64: (None, "INT64_T", _INT),
    torch.uint16: (None, "UINT16_T", _INT),
    torch.uint32: (None, "UINT32_T", _INT),
    torch.uint64: (None, "UINT64_T", _INT),
    torch.bool: (None, "C_BOOL", _BOOL),
    torch.complex64: (None, "C_FLOAT_COMPLEX", _COMPLEX),
    torch.complex128: (None, "C_DOUBLE_COMPLEX", _COMPLEX),
    torch.complex32: (torch.int32, "UINT32_T", _OPAQUE),
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
              "float8_e8m0fnu"):
    if hasattr(torch, _name):
        _TABLE[getattr(torch, _name)] = (torch.uint8, "BYTE", _OPAQUE)

# dtype -> (view dtype, MPI.Datatype, kind); filled on first use (needs MPI).
_RESOLVED: dict = {}
_OPS: dict = {}


def resolve(dtype):
    """(view dtype or None, MPI datatype, kind) for a torch dtype."""
    r = _RESOLVED.get(dtype)
    if r is None:
        ent = _TABLE.get(dtype)
        if ent is None:
            raise TypeError(f"mpi backend: unsupported dtype {dtype}")
        r = (ent[0], getattr(mpienv.mpi_module(), ent[1]), ent[2])
        _RESOLVED[dtype] = r
    return r


def buffer(t):
    """``[numpy view, MPI datatype]`` sharing ``t``'s memory (t: CPU, contiguous)."""
    view, mtype, _ = resolve(t.dtype)
    if t.requires_grad:
        t = t.detach()
    if view is not None:
        t = t.view(view)
    return [t.numpy(), mtype]


# ---- reductions -------------------------------------------------------------

def _bf16_to_f32(buf):
    return (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(x, out_u16):
    # torch's round_to_nearest_even, NaN -> 0x7FC0 (c10/util/BFloat16.h).
    u = x.view(np.uint32)
    r = ((u + (((u >> 16) & 1) + np.uint32(0x7FFF))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r[nan] = 0x7FC0
    out_u16[...] = r


def _make_user_op(kind, ufunc):
    MPI = mpienv.mpi_module()
    if kind == _HALF:
        def fn(inbuf, inoutbuf, datatype):
            a = np.frombuffer(inbuf, np.float16).astype(np.float32)
            io = np.frombuffer(inoutbuf, np.float16)
            io[...] = ufunc(a, io.astype(np.float32)).astype(np.float16)
    else:
        def fn(inbuf, inoutbuf, datatype):
            io = np.frombuffer(inoutbuf, np.uint16)
            _f32_to_bf16(ufunc(_bf16_to_f32(inbuf), _bf16_to_f32(inoutbuf)), io)
    return MPI.Op.Create(fn, commute=True)


_UFUNC = {RedOpType.SUM: np.add, RedOpType.AVG: np.add, RedOpType.PRODUCT: np.multiply,
          RedOpType.MIN: np.minimum, RedOpType.MAX: np.maximum}
_BITWISE = (RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR)
_NOT_BITWISE = "bitwise op on a non-integral dtype"
# kind -> (the ops refused on it, as gloo refuses them, and why)
_REFUSED = {
    _INT: ((RedOpType.AVG,), "AVG of integers is not an integer; gloo refuses it too"),
    _FLOAT: (_BITWISE, _NOT_BITWISE),
    # gloo refuses PRODUCT too; refusing keeps results "equal to gloo's".
    _COMPLEX: ((RedOpType.PRODUCT, RedOpType.MIN, RedOpType.MAX, *_BITWISE),
               "only SUM and AVG are defined for complex tensors"),
    _BOOL: ((RedOpType.AVG,), ""),
    _HALF: (_BITWISE, _NOT_BITWISE),
    _BF16: (_BITWISE, _NOT_BITWISE),
    _OPAQUE: ((*_UFUNC, *_BITWISE), "MPI has no arithmetic for this type"),
}


# RedOpType -> the MPI.Op's name; of bool tensors, which gloo reduces as bytes holding 0/1:
# SUM/MAX/BOR = or, PRODUCT/MIN/BAND = and.
_MPI_OP = {RedOpType.SUM: "SUM", RedOpType.AVG: "SUM", RedOpType.PRODUCT: "PROD", RedOpType.MIN: "MIN",
           RedOpType.MAX: "MAX", RedOpType.BAND: "BAND", RedOpType.BOR: "BOR", RedOpType.BXOR: "BXOR"}
_BOOL_OP = {RedOpType.SUM: "LOR", RedOpType.MAX: "LOR", RedOpType.BOR: "LOR", RedOpType.PRODUCT: "LAND",
            RedOpType.MIN: "LAND", RedOpType.BAND: "LAND", RedOpType.BXOR: "LXOR"}


def _unsupported(optype, dtype, why=""):
    name = str(optype).split(".")[-1]
    return ValueError(f"mpi backend: ReduceOp.{name} is not supported for dtype {dtype}"
                      + (f" ({why})" if why else ""))


def reduce_op(op, dtype):
    """(MPI.Op, divide_by_size) for a ReduceOp (or RedOpType) on ``dtype``; ValueError where gloo
    refuses (bitwise on floats, AVG on integers, MIN/MAX on complex) and for PREMUL_SUM."""
    optype = getattr(op, "op", op)
    key = (optype, dtype)
    r = _OPS.get(key)
    if r is not None:
        return r
    kind = resolve(dtype)[2]
    if optype == RedOpType.PREMUL_SUM:
        raise _unsupported(optype, dtype, "a pre-multiplied sum needs a per-call scalar; "
                           "scale the tensor and use SUM")
    if optype not in _UFUNC and optype not in _BITWISE:
        raise _unsupported(optype, dtype)
    refused, why = _REFUSED[kind]
    if optype in refused:
        raise _unsupported(optype, dtype, why)
    if kind in (_HALF, _BF16):
        mop = _make_user_op(kind, _UFUNC[optype])
    else:
        mop = getattr(mpienv.mpi_module(), (_BOOL_OP if kind == _BOOL else _MPI_OP)[optype])
    r = _OPS[key] = (mop, optype == RedOpType.AVG)
    return r
