"""Windows (``--steps``, ``--skip-steps``, ``--from/--to``, ``--phase``; analysis.window) in the
partitioned analysis.

A window is per rank (an interval [lo, hi] and the phases asked for): a rank task applies it to
its ops and steps (``window.apply``) and returns the rank's interval; partition tasks keep the
records whose op starts inside its rank's interval and has one of the phases (``in_window``).
Run-wide: ``--from/--to`` count from the run's first op (a first pass: ``first_start``), and a
rank's window length is cut to the run's extent, first op (or span) to last op end (``RankWindow``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...errors import CommtraceError
from ...trace import reader, records
from ..arrays import NA_KEY
from ..window import Applied, Window, apply
from .plan import read_rank
from .rank_ops import key_str


@dataclass
class RankWindow:
    """What the reduce needs of one rank's window."""
    bounds: dict | None         # rank -> (lo, hi) (None: no time range)
    phases: set                 # the phases of all the rank's ops ("-": none), for the --phase check
    lo: int | None              # the rank's first op start or span begin (all ops)
    hi: int | None              # its last op end or span end


def applied_to_rank(window: Window | None, ops, steps: pd.DataFrame, t0: int | None) -> Applied | None:
    """``window.apply`` on one rank's ops (rank_ops.RankOps or None) and steps; None: no window."""
    if window is None or window.whole_run:
        return None
    from .region_figures import no_ops
    a = ops.arrays if ops is not None else no_ops()
    frame = pd.DataFrame({"phase": _phase_of_ops(ops)}) if window.phases is not None else pd.DataFrame()
    return apply(window, frame, a, steps, t0)


def rank_window(applied: Applied | None, ops, spans: pd.DataFrame | None) -> RankWindow | None:
    if applied is None:
        return None
    los, his = [], []
    if ops is not None and len(ops.arrays.start):
        los.append(int(ops.arrays.start.min()))
        his.append(int(ops.arrays.end.max()))
    if spans is not None and len(spans):
        los.append(int(spans["t_begin_ns"].min()))
        his.append(int(spans["t_end_ns"].max()))
    phases = {c[2] for c in ops.cells} if ops is not None else set()
    return RankWindow(applied.bounds, phases, min(los) if los else None, max(his) if his else None)


def check_phases(window: Window | None, parts: list) -> None:
    """--phase names must exist among the run's ops."""
    if window is None or window.phases is None:
        return
    known = {p for w in parts if w is not None for p in w.phases} | {NA_KEY}
    unknown = [p for p in window.phases if p not in known]
    if unknown:
        have = ", ".join(sorted(known))
        raise CommtraceError(f"--phase {','.join(unknown)}: no op of this run has that phase (phases: {have}; "
                             "'-' = ops without a phase)")


def window_lengths(parts: list) -> dict | None:
    """Per rank (every rank's RankWindow), its interval cut to the run's first op (or span) ..
    last op end (or span end)."""
    bounds = all_bounds(parts)
    if bounds is None:
        return None
    los = [w.lo for w in parts if w is not None and w.lo is not None]
    his = [w.hi for w in parts if w is not None and w.hi is not None]
    lo_run, hi_run = (min(los), max(his)) if los else (0, 0)
    return {r: max(0, min(hi, hi_run) - max(lo, lo_run)) for r, (lo, hi) in sorted(bounds.items())}


def all_bounds(parts: list) -> dict | None:
    """Every rank's interval (None: no time range)."""
    parts = [w for w in parts if w is not None]
    if not parts or parts[0].bounds is None:
        return None
    return {r: b for w in parts for r, b in w.bounds.items()}


def in_window(key: int, pt, rec: np.ndarray, t: np.ndarray, bounds: dict | None, phases: tuple | None) -> np.ndarray:
    """Which of a process's records (``t``: their aligned starts; ``key``: its rank key) are in the
    window (window.apply's rule)."""
    keep = np.ones(len(rec), dtype=bool)
    if bounds is not None:
        lo, hi = bounds.get(key, (0, 0))
        keep &= (t >= lo) & (t <= hi) & (hi > lo)
    if phases is not None:
        ids = sorted(pt.sigs)
        lut = np.zeros(max(ids) + 1, bool)
        lut[ids] = [key_str(pt.sigs[i].get("phase")) in phases for i in ids]
        keep &= lut[rec["sig"]]
    return keep


def frame_in_window(frame: pd.DataFrame, bounds: dict | None, phases: tuple | None) -> pd.DataFrame:
    """The rows of a frame (some ranks' ops, as reader.build_frame gives them) in the window."""
    if (bounds is None and phases is None) or not len(frame):
        return frame
    keep = np.ones(len(frame), dtype=bool)
    if bounds is not None:
        rank, t = frame["rank"].to_numpy(np.int64), frame["t_start_ns"].to_numpy(np.int64)
        lo = np.array([bounds.get(int(r), (0, 0))[0] for r in rank], np.int64)
        hi = np.array([bounds.get(int(r), (0, 0))[1] for r in rank], np.int64)
        keep &= (t >= lo) & (t <= hi) & (hi > lo)
    if phases is not None:
        keep &= np.isin(frame["phase"].astype(object).fillna(NA_KEY).to_numpy(), list(phases))
    return frame[keep].reset_index(drop=True)


def _phase_of_ops(ops) -> pd.Categorical:
    if ops is None:
        return pd.Categorical([])
    names = sorted({c[2] for c in ops.cells})
    code = np.array([names.index(c[2]) for c in ops.cells], np.int64)
    return pd.Categorical.from_codes(code[ops.cell], categories=names)


@dataclass
class FirstStartTask:
    metas: list
    refs: dict


def first_start(task: FirstStartTask) -> int | None:
    """The first op start (rank 0's clock) of one rank's processes: the run's first op is the
    least of them (--from/--to count from it)."""
    procs, refs = read_rank(task.metas, task.refs, [])
    starts = []
    for pt in procs:
        rec = pt.records
        if rec is None or not len(rec):
            continue
        clock_pt = reader.python_twin(pt, procs)   # a C++-layer file is timed on its process's clock
        starts.append(int(records.call_times(clock_pt, refs.get(clock_pt.world_id), rec).min()))
    return min(starts, default=None)
