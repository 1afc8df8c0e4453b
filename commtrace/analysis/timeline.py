"""Timeline binning (one lane per rank, ``width`` cells) and the merged event list."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import CommtraceError
from .arrays import OpArrays, cat_codes
from ..trace.rank_ranges import rank_name, several_worlds

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000,
          "min": 60_000_000_000, "": 1_000_000_000}
_TIME_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s|min|m)?\s*$")


def parse_time(text: str) -> int:
    """'1.5s', '200ms', '30us', '5' (seconds) -> ns."""
    m = _TIME_RE.match(str(text))
    if not m:
        raise CommtraceError(f"bad time {text!r} (use e.g. 1.5s, 200ms, 30us)")
    return int(round(float(m.group(1)) * _UNITS[m.group(2) or ""]))


@dataclass
class Timeline:
    ranks: list[int]
    ops: list[str]            # legend: index -> op name
    cells: np.ndarray         # ranks x width: op index of the op that fills most of the cell, -1 empty
    fill: np.ndarray          # ranks x width: fraction of the cell covered by any op (0..1, may exceed 1 if overlapping)
    t_from_ns: int            # relative to t0
    t_to_ns: int
    t0_ns: int

    @property
    def width(self) -> int:
        return self.cells.shape[1]


def bin_timeline(frame: pd.DataFrame, t0: int, width: int, t_from: int | None = None, t_to: int | None = None,
                 arrays: OpArrays | None = None) -> Timeline:
    """Per rank and cell, the op occupying the most time in that cell (vectorized)."""
    a = arrays or OpArrays.of(frame)
    width = max(int(width), 1)
    opc, opnames = cat_codes(frame["op"]) if len(frame) else (np.empty(0, int), [])
    ranks = sorted(set(a.rank.tolist()))
    rel_e = a.end - t0
    lo, hi = cell_range(t_from, t_to, int(rel_e.max()) if len(rel_e) else None)
    if not len(frame):
        return Timeline(ranks, list(map(str, opnames)), np.full((0, width), -1), np.zeros((0, width)), lo, hi, t0)
    lane = np.searchsorted(np.array(ranks), a.rank)
    occ = occupancy(lane, len(ranks), opc, max(len(opnames), 1), a.start - t0, rel_e, lo, hi, width)
    cells, fill = lane_cells(occ)
    return Timeline(ranks, list(map(str, opnames)), cells, fill, lo, hi, t0)


def cell_range(t_from: int | None, t_to: int | None, last_end: int | None) -> tuple[int, int]:
    """The binned range after t0: ``t_from`` (default 0) .. ``t_to`` (default ``last_end``), >= 1 ns."""
    lo = 0 if t_from is None else int(t_from)
    hi = (1 if last_end is None else int(last_end)) if t_to is None else int(t_to)
    return lo, (hi if hi > lo else lo + 1)


def occupancy(lane: np.ndarray, lanes: int, opc: np.ndarray, nops: int, rel_s: np.ndarray, rel_e: np.ndarray,
              lo: int, hi: int, width: int) -> np.ndarray:
    """lanes x nops x width: per lane, op code (``opc``, -1: none) and cell, the time the ops cover
    in it (in cells). A lane depends only on its own ops, so lanes binned apart (the partitioned
    report's timeline_map) equal lanes binned together."""
    sel = (rel_e >= lo) & (rel_s <= hi) & (opc >= 0)
    dt = (hi - lo) / width
    s = (np.clip(rel_s[sel], lo, hi) - lo) / dt        # in cell units
    e = (np.clip(rel_e[sel], lo, hi) - lo) / dt
    e = np.maximum(e, s + 1e-3)                         # zero-length ops still show up
    lane = lane[sel]
    op = opc[sel]
    cs = np.minimum(np.floor(s).astype(np.int64), width - 1)
    ce = np.minimum(np.floor(e).astype(np.int64), width - 1)
    occ = np.zeros(lanes * nops * (width + 1))
    base = (lane * nops + op) * (width + 1)
    same = cs == ce
    # Op inside a single cell.
    occ += np.bincount(base[same] + cs[same], weights=(e - s)[same], minlength=occ.size)
    # Spanning ops: partial first and last cell, full cells in between (difference array).
    sp = ~same
    occ += np.bincount(base[sp] + cs[sp], weights=(cs[sp] + 1 - s[sp]), minlength=occ.size)
    occ += np.bincount(base[sp] + ce[sp], weights=(e[sp] - ce[sp]), minlength=occ.size)
    diff = np.zeros(occ.size)
    np.add.at(diff, base[sp] + cs[sp] + 1, 1.0)
    np.add.at(diff, base[sp] + ce[sp], -1.0)
    full = np.cumsum(diff.reshape(lanes * nops, width + 1), axis=1)
    return occ.reshape(lanes, nops, width + 1)[:, :, :width] + full.reshape(lanes, nops, width + 1)[:, :, :width]


def lane_cells(occ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of ``occupancy``'s lanes: the op filling most of it (-1: empty), and how much ops fill it."""
    return np.where(occ.max(axis=1) > 0, occ.argmax(axis=1), -1), occ.sum(axis=1)


def timeline_layout(console_width: int, rank_list: list) -> tuple[int, int]:
    """(label width, cells) of the terminal timeline in a console ``console_width`` wide."""
    several = several_worlds(rank_list or [])
    label_w = max(len(f"rank {rank_name(r, several)}") for r in (rank_list or [0])) + 1
    return label_w, max(int(console_width) - label_w - 2, 10)


def timeline_range(bounds: dict | None, t0: int, window) -> tuple[int | None, int | None]:
    """The timeline's range after t0: --from/--to, else the window's extent (``bounds`` per rank)."""
    lo, hi = window.t_from, window.t_to
    if bounds:
        los = [v[0] for v in bounds.values() if v[1] > v[0]]
        his = [v[1] for v in bounds.values() if v[1] > v[0]]
        if lo is None and los:
            lo = max(min(los) - t0, 0)
        if hi is None and his and max(his) < (1 << 60):
            hi = max(his) - t0
    return lo, hi


EVENT_COLUMNS = ["t_rel_ns", "rank", "op", "shapes", "dtype", "bytes", "group", "seq", "duration_ns", "status",
                 "api", "detail"]


def event_positions(start: np.ndarray, t_from: int | None, t_to: int | None, limit: int | None) -> np.ndarray:
    """Positions of the ops starting (after t0) at ``start`` in the range, time order, at most ``limit``."""
    sel = np.ones(len(start), dtype=bool)
    if t_from is not None:
        sel &= start >= t_from
    if t_to is not None:
        sel &= start <= t_to
    idx = np.flatnonzero(sel)
    if not np.all(np.diff(start[idx]) >= 0):
        idx = idx[np.argsort(start[idx], kind="stable")]
    return idx if limit is None else idx[:limit]


def event_rows(frame: pd.DataFrame, t0: int, t_from: int | None = None, t_to: int | None = None,
               limit: int | None = None) -> pd.DataFrame:
    """The merged, time-ordered ops (rank 0's clock), times relative to ``t0``."""
    start = frame["t_start_ns"].to_numpy(dtype=np.int64) - t0 if len(frame) else np.empty(0, np.int64)
    idx = event_positions(start, t_from, t_to, limit)
    out = frame.iloc[idx][[c for c in EVENT_COLUMNS[1:] if c in frame]].copy()
    out.insert(0, "t_rel_ns", start[idx])
    return out.reset_index(drop=True)
