"""Object collectives, labelled: ``all_gather_object``, ``broadcast_object_list``,
``gather_object``, ``scatter_object_list``, ``send_object_list``, ``recv_object_list``.

Each pickles its objects into uint8 tensors and moves them with ordinary
collectives: first the sizes (int64 tensors), then the payload (uint8) -- so
the trace showed two anonymous all_gathers (or broadcasts, ...). While one of
these functions runs, the annotation context carries ``api`` (its name); the
sig of every op it issues gets ``api`` and ``detail`` ("object_sizes" or
"object_payload", told apart by dtype: torch's implementations send sizes as
torch.long and payloads as torch.uint8). Both wrappers record the context as
part of each sig, so the labels cost nothing per op.
"""
from __future__ import annotations

from .scopes import in_context

FUNCTIONS = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
             "send_object_list", "recv_object_list")
SIZES, PAYLOAD = "object_sizes", "object_payload"


def install(rec) -> list[str]:
    """Wrap the object collectives torch has (c10d and the torch.distributed
    names that re-export them); returns the names wrapped."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    done = []
    for name in FUNCTIONS:
        fn = getattr(c10d, name, None)
        if fn is None or getattr(fn, "_commtrace_api", None):
            continue
        wrapped = _labelled(rec, fn, name)
        setattr(c10d, name, wrapped)  # torch's own callers look it up here
        if getattr(dist, name, None) is fn:
            setattr(dist, name, wrapped)
        done.append(name)
    return done


def _labelled(rec, fn, name: str):
    labelled = in_context(rec, fn, lambda args: rec.push_context(api=name))
    labelled._commtrace_api = name
    return labelled


def part(desc: dict) -> str:
    """``detail`` of an op issued inside an object collective (``desc``: its sig)."""
    return SIZES if desc.get("dtype") == "int64" else PAYLOAD
