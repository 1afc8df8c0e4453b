"""Object collectives (``all_gather_object`` & co.), labelled.

Each moves sizes (int64) then a pickled payload (uint8) with ordinary collectives.
While one runs, the context carries ``api`` (its name), and the sig of each op gets
``detail`` "object_sizes" or "object_payload" by dtype: nothing per op.
"""
from __future__ import annotations

from .scopes import in_context

FUNCTIONS = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
             "send_object_list", "recv_object_list")
SIZES, PAYLOAD = "object_sizes", "object_payload"


def install(rec) -> list[str]:
    """Wrap the object collectives torch has (in c10d and torch.distributed); the names wrapped."""
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
