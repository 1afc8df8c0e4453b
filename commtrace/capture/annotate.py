"""User annotations: regions and marks. Cheap no-ops when not tracing."""
from __future__ import annotations

import contextlib
import time

from ..trace import schema
from .activate import active_recorder


@contextlib.contextmanager
def region(label: str):
    rec = active_recorder()
    if rec is None:
        yield
        return
    prev = rec.context_field("region")
    name = str(label) if prev is None else f"{prev}/{label}"
    _mark(rec, "region_begin", name)
    token = rec.push_context(region=name)
    try:
        yield
    finally:
        rec.pop_context(token)
        _mark(rec, "region_end", name)


def mark(label: str) -> None:
    rec = active_recorder()
    if rec is not None:
        _mark(rec, "mark", str(label))


def _mark(rec, kind: str, label: str) -> None:
    rec.add_meta({"type": schema.META_MARK, "kind": kind, "label": label, "t_mono_ns": time.monotonic_ns()})
