"""What the mpi backend's ops check and copy: devices MPI can read, the tensor
and option forms torch passes, byte views and copies around MPI buffers."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from . import runtime

_ReduceOp = dist.ReduceOp
_SUM = _ReduceOp.SUM
_U8 = torch.uint8


def cuda_aware() -> bool:
    """Whether MPI may be handed device pointers: COMMTRACE_MPI_CUDA_AWARE, else Open MPI's
    MPIX_Query_cuda_support where mpi4py has it (there is no portable query)."""
    env = os.environ.get("COMMTRACE_MPI_CUDA_AWARE", "").lower()
    if env in ("1", "true", "yes"):
        return True
    if env in ("0", "false", "no"):
        return False
    q = getattr(runtime.init(), "Query_cuda_support", None)
    try:
        return bool(q()) if q is not None else False
    except Exception:
        return False


def check_device(device, is_cuda_aware=None) -> None:
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


def _scatter_back(flat, tensors, divide_by=None):
    """Copy consecutive slices of ``flat`` back into ``tensors`` (dividing for AVG)."""
    if divide_by:
        flat.div_(divide_by)
    off = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[off:off + n].view_as(t))
        off += n


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


def _redop(opts):
    if opts is None:
        return _SUM
    if isinstance(opts, (_ReduceOp, _ReduceOp.RedOpType)):
        return opts
    return opts.reduceOp
