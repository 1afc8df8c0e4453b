"""User annotations: regions and marks. Cheap no-ops when not tracing."""
from __future__ import annotations

import contextlib
import time

from ..trace import schema


def _recorder():
    from .activate import active_recorder
    return active_recorder()


@contextlib.contextmanager
def region(label: str):
    rec = _recorder()
    if rec is None:
        yield
        return
    prev = rec.context_fields().get("region")
    name = str(label) if prev is None else f"{prev}/{label}"
    rec.add_meta({"type": schema.META_MARK, "kind": "region_begin", "label": name, "t_mono_ns": time.monotonic_ns()})
    token = rec.push_context(region=name)
    try:
        yield
    finally:
        rec.pop_context(token)
        rec.add_meta({"type": schema.META_MARK, "kind": "region_end", "label": name, "t_mono_ns": time.monotonic_ns()})


def mark(label: str) -> None:
    rec = _recorder()
    if rec is not None:
        rec.add_meta({"type": schema.META_MARK, "kind": "mark", "label": str(label), "t_mono_ns": time.monotonic_ns()})
