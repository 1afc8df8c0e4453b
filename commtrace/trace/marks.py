"""Tables on rank 0's clock of compute spans (SPAN_RECORDs; older traces: ``mark`` lines of
kind ``span``), user marks (kind ``mark``) and regions (``region_begin``/``region_end``).
Untrusted lines: one with a missing or mistyped field is skipped, labels cut to ``MAX_LABEL``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from . import schema
from .records import aligned
from .schema import int_or_none

MAX_LABEL = 200
MAX_LABELS = 1_000_000   # label ids beyond this are ignored (untrusted input sizes a lookup table)

SPAN_COLUMNS = ["rank", "file", "phase", "module", "iteration", "step", "grad", "t_begin_ns", "t_end_ns"]
MARK_COLUMNS = ["rank", "file", "label", "t_ns"]
REGION_COLUMNS = ["rank", "file", "label", "t_begin_ns", "t_end_ns", "closed"]
_PHASE_DTYPE = pd.CategoricalDtype(list(schema.SPAN_PHASES))


def _label(v) -> str:
    return str(v)[:MAX_LABEL] if v is not None else ""


def spans_table(parts) -> pd.DataFrame:
    """All processes' compute spans (process by process, each in time order). ``parts``: per process
    (SPAN_RECORDs, label id -> text, mark lines, rank, file stem, clock offset function), read
    lazily and dropped once copied: the peak is the table plus one process's records."""
    pieces, modules = [], {}
    for rec, labels, marks, rank, file, offset in parts:
        rec, names = _with_legacy(rec, marks)
        pieces.append((rec, _module_codes(rec, labels, names, modules), rank, file, offset))
    n = sum(len(p[0]) for p in pieces)
    cols = {"rank": np.empty(n, np.int32), "file": np.empty(n, np.int32), "phase": np.empty(n, np.int8),
            "module": np.empty(n, np.int32), "iteration": np.empty(n, np.int32), "step": np.empty(n, np.int32),
            "grad": np.empty(n, bool), "t_begin_ns": np.empty(n, np.int64), "t_end_ns": np.empty(n, np.int64)}
    files, at = [], 0
    for i in range(len(pieces)):
        rec, codes, rank, file, offset = pieces[i]
        pieces[i] = None   # its records go as soon as they are copied
        sl = slice(at, at + len(rec))
        at += len(rec)
        files.append(file)
        cols["rank"][sl], cols["file"][sl], cols["phase"][sl] = rank, len(files) - 1, rec["phase"]
        cols["module"][sl] = codes
        cols["iteration"][sl] = np.minimum(rec["iteration"], 2**31 - 1)
        cols["step"][sl] = np.minimum(rec["step"], 2**31 - 1)
        cols["grad"][sl] = (rec["flags"] & schema.SPAN_FLAG_GRAD).astype(bool)
        cols["t_begin_ns"][sl] = aligned(rec["t_begin"], offset)
        cols["t_end_ns"][sl] = aligned(rec["t_end"], offset)
    # codes built here lie in range: no validation of them (it is a pass over every span)
    cols["file"] = pd.Categorical.from_codes(cols["file"], categories=pd.Index(files, dtype=object),  # stems are unique
                                             validate=False)
    cols["phase"] = pd.Categorical.from_codes(cols["phase"], dtype=_PHASE_DTYPE, validate=False)
    cols["module"] = pd.Categorical.from_codes(cols["module"], categories=pd.Index(list(modules), dtype=object),
                                               validate=False)
    return pd.DataFrame(cols, columns=SPAN_COLUMNS, copy=False)   # its own new columns: not copied into blocks


def _with_legacy(rec, marks: list[dict]):
    """(records plus those of legacy span marks, the legacy marks' module names)."""
    rec = rec if rec is not None else np.empty(0, dtype=schema.SPAN_RECORD)
    legacy = [m for m in marks if m.get("kind") == "span" and m.get("phase") in schema.SPAN_PHASES
              and int_or_none(m.get("t_begin_ns")) is not None and int_or_none(m.get("t_end_ns")) is not None
              and m["t_end_ns"] >= m["t_begin_ns"]]
    if not legacy:
        return rec, []
    old = np.zeros(len(legacy), dtype=schema.SPAN_RECORD)
    old["t_begin"] = [m["t_begin_ns"] for m in legacy]
    old["t_end"] = [m["t_end_ns"] for m in legacy]
    old["phase"] = [schema.SPAN_PHASES.index(m["phase"]) for m in legacy]
    old["iteration"] = [min(max(int_or_none(m.get("iteration")) or 0, 0), 2**32 - 1) for m in legacy]
    old["flags"] = schema.SPAN_FLAG_GRAD
    old["label"] = schema.SPAN_NO_LABEL
    return np.concatenate((rec, old)), [_label(m.get("module")) if m.get("module") is not None else None
                                        for m in legacy]


def _module_codes(rec, labels: dict, names: list, modules: dict) -> np.ndarray:
    """Per record the code (into ``modules``, text -> code, shared by all processes) of
    its label's text; -1: no label, or an undefined one. ``names``: the legacy tail's."""
    def code(text):
        return modules.setdefault(text, len(modules))
    labels = {i: _label(t) for i, t in labels.items() if isinstance(i, int) and 0 <= i < MAX_LABELS}
    lut = np.full(max(labels, default=-1) + 2, -1, dtype=np.int32)   # the last slot: unknown ids
    for i, text in labels.items():
        lut[i] = code(text)
    codes = lut.take(rec["label"], mode="clip")     # ids beyond the table: its last slot
    if names:
        codes[len(rec) - len(names):] = [code(n) if n is not None else -1 for n in names]
    return codes


def user_marks_of(marks: list[dict], rank: int, file: str, offset: Callable) -> pd.DataFrame:
    rows = [m for m in marks if m.get("kind") == "mark" and int_or_none(m.get("t_mono_ns")) is not None]
    return pd.DataFrame({
        "rank": np.full(len(rows), rank, dtype=np.int32), "file": pd.Categorical([file] * len(rows)),
        "label": pd.Categorical([_label(m.get("label")) for m in rows]),
        "t_ns": aligned([m["t_mono_ns"] for m in rows], offset),
    }, columns=MARK_COLUMNS)


def regions_of(marks: list[dict], rank: int, file: str, offset: Callable, t_close: int | None) -> pd.DataFrame:
    """region_begin/region_end lines paired by label (innermost first); one still open is closed
    at ``t_close`` (the end record; None: no length) with ``closed=False``."""
    open_: dict[str, list[int]] = {}
    out: list[tuple] = []
    events = sorted((m for m in marks if m.get("kind") in ("region_begin", "region_end")
                     and int_or_none(m.get("t_mono_ns")) is not None), key=lambda m: m["t_mono_ns"])
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
        "rank": np.full(len(out), rank, dtype=np.int32), "file": pd.Categorical([file] * len(out)),
        "label": pd.Categorical([r[0] for r in out]),
        "t_begin_ns": aligned([r[1] for r in out], offset),
        "t_end_ns": aligned([r[2] for r in out], offset),
        "closed": np.array([r[3] for r in out], dtype=bool),
    }, columns=REGION_COLUMNS)


def empty_marks() -> pd.DataFrame:
    return _EMPTY_MARKS.copy()   # callers may change it


def empty_regions() -> pd.DataFrame:
    return _EMPTY_REGIONS.copy()


def concat(parts: list[pd.DataFrame], empty: pd.DataFrame, sort: bool = True) -> pd.DataFrame:
    """The per-process parts as one table (``empty`` when none; categoricals kept), by time if ``sort``."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty
    cols = {}
    for c in empty.columns:
        if isinstance(empty[c].dtype, pd.CategoricalDtype):
            cols[c] = union_categoricals([p[c].array for p in parts])
        else:
            cols[c] = np.concatenate([p[c].to_numpy() for p in parts])
    df = pd.DataFrame(cols, columns=empty.columns)
    if sort:
        by = [c for c in ("t_begin_ns", "t_ns") if c in df][0]
        df = df.sort_values([by, "rank"], kind="stable", ignore_index=True)
    return df


_EMPTY_MARKS = user_marks_of([], -1, "", lambda t: 0)          # built once: ~0.2 ms of pandas each
_EMPTY_REGIONS = regions_of([], -1, "", lambda t: 0, None)
