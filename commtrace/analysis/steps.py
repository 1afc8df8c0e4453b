"""Training steps from the compute spans, and which step each op belongs to (pure).

Definitions: docs/report.md, "Steps". A step runs from the first training forward or backward pass
(or pipeline schedule's step() call) after the previous step through its optimizer step (capture
numbers steps: capture.phases.StepCounter); its micro-steps are its backward passes. A rank without
forward spans begins a step at its first op or backward pass after the previous step. An op belongs
to the step of its rank containing its start, else it is before, between or after the steps. Steps
keep capture's numbers (a bounded trace keeps some); a rank's later processes continue after its
earlier ones' numbers.
"""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from . import intervals as iv
from .arrays import OpArrays, cat_codes, dense_codes, rows_by_rank, take_rows
from .native_ext import kernels

STEP_COLUMNS = ["rank", "step", "t_begin_ns", "t_end_ns", "micro_steps", "file"]

# Where an op lies relative to its rank's steps.
IN_STEP, BEFORE, BETWEEN, AFTER, NO_STEPS = 0, 1, 2, 3, 4
_LOCATE_CHUNK = 1 << 16     # ops locate_ops' numpy code places at a time
OUTSIDE_NAMES = {BEFORE: "before the first step", BETWEEN: "between steps", AFTER: "after the last step",
                 NO_STEPS: "no steps on this rank"}


def find_steps(spans: pd.DataFrame | None) -> pd.DataFrame:
    """One row per (rank, step): rank, step, t_begin_ns, t_end_ns, micro_steps, file; from the spans alone
    (read before the ops: its per-span temporaries not beside them): then begin_at_first_op."""
    if spans is None or len(spans) == 0 or "step" not in spans:
        return _empty()
    step = spans["step"].to_numpy()
    pcodes, phases = cat_codes(spans["phase"])
    phase_is = {name: pcodes == (phases.index(name) if name in phases else -2)
                for name in ("forward", "backward", "optimizer", "schedule")}
    fcodes, files = cat_codes(spans["file"])
    per_file = int(step.max()) + 1
    key = fcodes.astype(np.int64) * per_file + step                 # (process, step)
    b = spans["t_begin_ns"].to_numpy(np.int64)
    e = spans["t_end_ns"].to_numpy(np.int64)
    opt = phase_is["optimizer"] & (step > 0)
    if not opt.any():
        return _empty()
    kind = np.zeros(len(key), np.int8)
    # a pipeline schedule's step() call begins its step as a training forward does
    kind[(phase_is["forward"] | phase_is["schedule"]) & spans["grad"].to_numpy(dtype=bool)] = TRAINING_FORWARD
    kind[phase_is["backward"]] = BACKWARD
    kind[opt] = OPTIMIZER
    span_rank = spans["rank"].to_numpy(np.int32)
    del phase_is, opt, pcodes           # per span: not held beside step_bounds' tables (the task's peak)
    keys, begin, end, micro = step_bounds(key, kind, b, e)
    del key, kind
    fcode = keys // per_file
    file_rank = np.zeros(len(files), dtype=np.int32)     # a file is one process: one rank
    file_rank[fcodes] = span_rank
    rank = file_rank[fcode]
    number = (keys % per_file).astype(np.int32)
    if not _in_order(rank, begin):                            # (rank, begin) order; often already so
        order = np.lexsort((begin, rank))                     # stable
        fcode, rank, number, begin, end, micro = (x[order] for x in (fcode, rank, number, begin, end, micro))
    return pd.DataFrame({"rank": rank, "step": _numbered_per_rank(rank, number, fcode), "t_begin_ns": begin,
                         "t_end_ns": end, "micro_steps": micro.astype(np.int32),
                         "file": pd.Categorical.from_codes(fcode.astype(np.int32), categories=pd.Index(files),
                                                           validate=False)},
                        columns=STEP_COLUMNS, copy=False)


OPTIMIZER, BACKWARD, TRAINING_FORWARD = 1, 2, 3     # step_bounds' kinds of span (0: any other)


def compute_spans(spans: pd.DataFrame | None) -> pd.DataFrame | None:
    """``spans`` without the ``schedule`` spans (a pipeline schedule's step() calls): they bound
    steps (find_steps) but are no compute, their time holding the pipeline's bubbles."""
    if spans is None or len(spans) == 0:
        return spans
    codes, phases = cat_codes(spans["phase"])
    if "schedule" not in phases:
        return spans
    keep = codes != phases.index("schedule")
    return spans if keep.all() else spans[keep].reset_index(drop=True)


def step_bounds(key: np.ndarray, kind: np.ndarray, b: np.ndarray, e: np.ndarray) -> tuple:
    """(keys, begin, end, micro-steps) per distinct ``key`` ((process, step)) of OPTIMIZER spans,
    sorted: the first begin of its optimizer, backward and training-forward spans, the last end of
    its optimizer spans, its BACKWARD span count. Keys without an optimizer span are no step."""
    opt = kind == OPTIMIZER
    kern = kernels()
    if kern is not None and opt.any():
        used = kind > 0                 # their min and max without a copy of the keys
        lo = int(key.min(where=used, initial=np.iinfo(np.int64).max))
        span = int(key.max(where=used, initial=np.iinfo(np.int64).min)) - lo + 1
        if span <= max(4 * len(key), 1 << 20):       # a table over the keys' range (untrusted step numbers)
            n = int(opt.sum())
            keys, begin, end, micro = (np.empty(n, np.int64) for _ in range(4))
            i64 = functools.partial(np.ascontiguousarray, dtype=np.int64)
            count = kern.step_bounds(i64(key), np.ascontiguousarray(kind, np.int8), i64(b), i64(e), lo, span,
                                     keys, begin, end, micro)
            return keys[:count], begin[:count], end[:count], micro[:count]
    keys, inv = dense_codes(key[opt])                            # every step has an optimizer span
    n = len(keys)
    begin = np.full(n, np.iinfo(np.int64).max)
    end = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(begin, inv, b[opt])
    np.maximum.at(end, inv, e[opt])
    backward, forward = kind == BACKWARD, kind == TRAINING_FORWARD
    of_backward = _step_of(keys, key[backward])
    for sel, idx in ((backward, of_backward), (forward, _step_of(keys, key[forward]))):
        ok = idx >= 0                                         # the step begins at its first span
        np.minimum.at(begin, idx[ok], b[sel][ok])
    micro = np.bincount(of_backward[of_backward >= 0], minlength=n).astype(np.int64)   # micro-steps: backward passes
    return keys, begin, end, micro


def _in_order(rank: np.ndarray, begin: np.ndarray) -> bool:
    """Rows sorted by (rank, begin): a stable sort would leave them as they are."""
    r0, r1, b0, b1 = rank[:-1], rank[1:], begin[:-1], begin[1:]
    return bool(((r1 > r0) | ((r1 == r0) & (b1 >= b0))).all())


def _numbered_per_rank(rank: np.ndarray, step: np.ndarray, fcode: np.ndarray) -> np.ndarray:
    """Capture's step numbers, a rank's later processes (``fcode``: each row's file) continuing
    after its earlier ones'. Rows in (rank, begin) order."""
    step = step.astype(np.int32, copy=True)
    if len(fcode) == 0 or (fcode == fcode[0]).all():
        return step                     # one process in all
    for rows in rows_by_rank(rank).values():
        offset, files = 0, fcode[rows]
        if (files == files[0]).all():
            continue                    # one process on this rank
        for f in pd.unique(files):      # in time order: rows are sorted by begin
            mine = rows[files == f]
            step[mine] += offset
            offset = int(step[mine].max())
    return step


def _step_of(keys: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Index into ``keys`` (sorted) of each ``key``; -1 where absent (no optimizer step)."""
    k = iv.searchsorted(keys, key)
    ok = (k < len(keys)) & (keys[np.minimum(k, len(keys) - 1)] == key)
    return np.where(ok, k, -1)


def begin_at_first_op(steps: pd.DataFrame, spans: pd.DataFrame | None, a: OpArrays | None) -> pd.DataFrame:
    """``steps`` (find_steps of ``spans``) where ranks without forward spans begin a step at its first op
    after the previous step's end, if that is before its first span."""
    if a is None or not len(a.rank) or not len(steps):
        return steps
    pcodes, phases = cat_codes(spans["phase"])
    forward = pcodes == (phases.index("forward") if "forward" in phases else -2)
    with_forwards = set(dense_codes(spans["rank"].to_numpy(np.int32)[forward])[0].tolist())
    ranks, begin, end = (steps[c].to_numpy() for c in ("rank", "t_begin_ns", "t_end_ns"))
    todo = [r for r in np.unique(ranks).tolist() if r not in with_forwards]
    if not todo:
        return steps
    begin = begin.copy()
    for r in todo:
        rows = np.flatnonzero(ranks == r)
        starts = np.sort(a.start[a.rank == r])
        if not len(starts):
            continue
        prev_end = np.concatenate(([np.iinfo(np.int64).min], end[rows][:-1]))
        k = np.searchsorted(starts, prev_end, side="right")        # first op after the previous step
        first = starts[np.minimum(k, len(starts) - 1)]
        ok = (k < len(starts)) & (first < begin[rows])
        begin[rows] = np.where(ok, first, begin[rows])
    return steps.assign(t_begin_ns=begin)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == "file" else np.int64) for c in STEP_COLUMNS})


def locate_ops(arrays: OpArrays, steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per op: (step number, 0 outside every step; IN_STEP, BEFORE, BETWEEN, AFTER or NO_STEPS)."""
    n, placed = len(arrays.rank), []
    if n and len(steps):
        b = steps["t_begin_ns"].to_numpy(dtype=np.int64)
        e = steps["t_end_ns"].to_numpy(dtype=np.int64)
        num = steps["step"].to_numpy(dtype=np.int64)
        by_rank = arrays.rank_rows()
        for r, sel in rows_by_rank(steps["rank"].to_numpy()).items():   # steps are in (rank, begin) order
            rows = by_rank.get(r)
            if rows is None:
                continue
            all_rows = len(rows) == n                # a frame of one rank: no gather, no scatter (5 B/op less)
            s, w = _locate_in_steps(take_rows(b, sel), take_rows(e, sel), take_rows(num, sel),
                                    arrays.start if all_rows else arrays.start[rows])
            if all_rows:
                return s, w
            placed.append((rows, s, w))
    step, where = np.zeros(n, dtype=np.int32), np.full(n, NO_STEPS, dtype=np.int8)
    for rows, s, w in placed:
        step[rows], where[rows] = s, w
    return step, where


def _locate_in_steps(b: np.ndarray, e: np.ndarray, num: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """locate_ops for one rank: its steps (begin-sorted) and its ops' starts ``t``."""
    kern = kernels()
    step, where = np.empty(len(t), np.int32), np.empty(len(t), np.int8)
    if kern is not None:
        kern.locate(b, e, num, np.ascontiguousarray(t, dtype=np.int64), step, where, IN_STEP, BEFORE, BETWEEN, AFTER)
        return step, where
    for i in range(0, len(t), _LOCATE_CHUNK):        # op by op: a chunk's int64 temporaries at a time
        c = t[i:i + _LOCATE_CHUNK]
        k = np.searchsorted(b, c, side="right") - 1      # last step beginning at or before c
        kk = np.maximum(k, 0)
        inside = (k >= 0) & (c <= e[kk])
        step[i:i + _LOCATE_CHUNK] = np.where(inside, num[kk], 0)
        outside = np.where(k < 0, BEFORE, np.where(c > e[-1], AFTER, BETWEEN))
        where[i:i + _LOCATE_CHUNK] = np.where(inside, IN_STEP, outside)
    return step, where
