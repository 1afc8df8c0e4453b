"""Tables of the timed meta lines: compute spans, user marks, user regions.

Compute spans (DDP forward, backward pass, optimizer step) come in batched
``spans`` lines (schema.SPAN_FIELDS; older traces wrote one ``mark`` line of
kind ``span`` each); ``mark`` lines are ``commtrace.mark(label)`` (kind
``mark``) and ``commtrace.region(label)`` (kinds ``region_begin``/``region_end``). This module turns them into DataFrames on rank
0's clock. Lines are untrusted: a line with a missing or mistyped field is
skipped, labels are cut to ``MAX_LABEL`` characters.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

SPAN_PHASES = ("forward", "backward", "optimizer")
MAX_LABEL = 200

SPAN_COLUMNS = ["rank", "file", "phase", "module", "iteration", "step", "grad", "t_begin_ns", "t_end_ns"]
MARK_COLUMNS = ["rank", "file", "label", "t_ns"]
REGION_COLUMNS = ["rank", "file", "label", "t_begin_ns", "t_end_ns", "closed"]


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _label(v) -> str:
    return str(v)[:MAX_LABEL] if v is not None else ""


def _aligned(times: list[int], offset: Callable) -> np.ndarray:
    """Monotonic ns of one process -> rank 0's clock."""
    t = np.asarray(times, dtype=np.int64)
    return t + offset(t).astype(np.int64) if len(t) else t


def spans_of(marks: list[dict], span_lines: list[dict], rank: int, file: str, offset: Callable) -> pd.DataFrame:
    """Compute spans from batched ``spans`` lines (and ``mark`` lines of kind span,
    as older traces wrote them). A batched line whose arrays are not all ints of one
    length is skipped whole."""
    cols: dict[str, list] = {k: [] for k in ("phase", "module", "iteration", "step", "grad", "b", "e")}
    for line in span_lines:
        batch = _span_batch(line)
        if batch is not None:
            for k, v in batch.items():
                cols[k].extend(v)
    for m in marks:   # older traces: one mark line per span
        if m.get("kind") == "span":
            batch = _span_batch({"phase": [m.get("phase")], "t_begin_ns": [m.get("t_begin_ns")],
                                 "t_end_ns": [m.get("t_end_ns")], "step": [m.get("step", 0)],
                                 "iteration": [m.get("iteration", 0)], "module": [m.get("module")],
                                 "grad": [m.get("grad", True)]})
            if batch is not None:
                for k, v in batch.items():
                    cols[k].extend(v)
    b = np.asarray(cols["b"], dtype=np.int64)
    e = np.asarray(cols["e"], dtype=np.int64)
    ok = (e >= b) & np.isin(np.asarray(cols["phase"], dtype=object), SPAN_PHASES) if len(b) else np.zeros(0, bool)
    idx = np.flatnonzero(ok)
    return pd.DataFrame({
        "rank": np.full(len(idx), rank, dtype=np.int32), "file": [file] * len(idx),
        "phase": [cols["phase"][i] for i in idx],
        "module": [None if cols["module"][i] is None else _label(cols["module"][i]) for i in idx],
        "iteration": np.asarray(cols["iteration"], dtype=np.int64)[idx] if len(idx) else np.zeros(0, np.int64),
        "step": np.maximum(np.asarray(cols["step"], dtype=np.int64)[idx], 0) if len(idx) else np.zeros(0, np.int64),
        "grad": np.asarray(cols["grad"], dtype=bool)[idx] if len(idx) else np.zeros(0, bool),
        "t_begin_ns": _aligned(b[idx], offset),
        "t_end_ns": _aligned(e[idx], offset),
    }, columns=SPAN_COLUMNS)


def _span_batch(line: dict) -> dict | None:
    """The fields of one ``spans`` line, validated (None if malformed)."""
    try:
        phase = line["phase"]
        n = len(phase)
        b, e, step, it = (line[k] for k in ("t_begin_ns", "t_end_ns", "step", "iteration"))
        module = line.get("module") or [None] * n
        grad = line.get("grad") or [True] * n
        if not all(isinstance(x, list) and len(x) == n for x in (phase, b, e, step, it, module, grad)):
            return None
        if not all(_int(v) is not None for col in (b, e, step, it) for v in col):
            return None
        return {"phase": [p if isinstance(p, str) else "" for p in phase],
                "module": [m if m is None or isinstance(m, str) else str(m) for m in module],
                "iteration": it, "step": step, "grad": [g is not False for g in grad], "b": b, "e": e}
    except (KeyError, TypeError):
        return None


def user_marks_of(marks: list[dict], rank: int, file: str, offset: Callable) -> pd.DataFrame:
    rows = [m for m in marks if m.get("kind") == "mark" and _int(m.get("t_mono_ns")) is not None]
    return pd.DataFrame({
        "rank": np.full(len(rows), rank, dtype=np.int32), "file": [file] * len(rows),
        "label": [_label(m.get("label")) for m in rows],
        "t_ns": _aligned([m["t_mono_ns"] for m in rows], offset),
    }, columns=MARK_COLUMNS)


def regions_of(marks: list[dict], rank: int, file: str, offset: Callable, t_close: int | None) -> pd.DataFrame:
    """Pairs region_begin/region_end lines by label (innermost first). A region
    still open when the trace ends is closed at ``t_close`` (the process's end
    record) and flagged ``closed=False``; without an end record it has no length."""
    open_: dict[str, list[int]] = {}
    out: list[tuple] = []
    events = sorted((m for m in marks if m.get("kind") in ("region_begin", "region_end")
                     and _int(m.get("t_mono_ns")) is not None), key=lambda m: m["t_mono_ns"])
    for m in events:
        label = _label(m.get("label"))
        if m["kind"] == "region_begin":
            open_.setdefault(label, []).append(m["t_mono_ns"])
        elif open_.get(label):
            out.append((label, open_[label].pop(), m["t_mono_ns"], True))
    for label, begins in open_.items():
        for b in begins:
            out.append((label, b, max(t_close, b) if t_close is not None else b, False))
    out.sort(key=lambda r: r[1])
    return pd.DataFrame({
        "rank": np.full(len(out), rank, dtype=np.int32), "file": [file] * len(out),
        "label": [r[0] for r in out],
        "t_begin_ns": _aligned([r[1] for r in out], offset),
        "t_end_ns": _aligned([r[2] for r in out], offset),
        "closed": np.array([r[3] for r in out], dtype=bool),
    }, columns=REGION_COLUMNS)


def concat(parts: list[pd.DataFrame], empty: pd.DataFrame) -> pd.DataFrame:
    """The parts as one table in time order (``empty``, typed, when there are none)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty
    df = pd.concat(parts, ignore_index=True)
    sort_by = [c for c in ("t_begin_ns", "t_ns") if c in df][0]
    return df.sort_values([sort_by, "rank"], kind="stable", ignore_index=True)
