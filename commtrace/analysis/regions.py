"""Per user region (``commtrace.region(label)``): time, communication, ops (pure).

A region's time on a rank is the union of its intervals (re-entered, or on several threads; nested
regions are "outer/inner", inside their outer one). Ops count when they start inside; communication
is the rank's communication set intersected with the region's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import intervals as iv
from .arrays import OpArrays, rows_of, take_rows

REGION_TABLE_COLUMNS = ["ranks", "entries", "time_ns", "comm_ns", "comm_share", "ops", "bytes"]


def _inside(t: np.ndarray, s: iv.IntervalSet) -> np.ndarray:
    k = np.searchsorted(s[0], t, side="right") - 1
    return (k >= 0) & (t < s[1][np.maximum(k, 0)]) if len(s[0]) else np.zeros(len(t), dtype=bool)


class RegionFigures:
    """The per-region table. ``add`` each rank's communication set (one rank at a
    time), then ``region_table(acc)``: one row per region label; time_ns and comm_ns the mean
    over the ranks that entered it; comm_share = comm_ns / time_ns; ops and bytes
    over all ranks. ``bounds``: the window (rank -> (lo, hi))."""

    def __init__(self, regions: pd.DataFrame | None, a: OpArrays, selected: np.ndarray | None = None,
                 bounds: dict | None = None):
        self.a, self.selected, self.bounds = a, selected, bounds
        self.per_rank: dict[int, list] = {}     # rank -> [(label, region set, entries)]
        self.acc: dict[str, dict] = {}
        if regions is None or not len(regions):
            return
        for (label, r), g in regions.groupby(["label", "rank"], sort=True, observed=True):
            s = iv.union(g["t_begin_ns"].to_numpy(np.int64), g["t_end_ns"].to_numpy(np.int64))
            if bounds is not None:
                lo, hi = bounds.get(int(r), (0, 0))
                s = iv.clip(s, lo, hi)
            if len(s[0]):
                self.per_rank.setdefault(int(r), []).append((str(label), s, len(g)))

    def add(self, r: int, comm: iv.IntervalSet, first: bool = True) -> None:
        """Rank ``r``'s figures from its communication set, or each time piece of it (``first``: counts time, ops)."""
        regions = self.per_rank.get(r, ())
        rows = self.a.rank_rows().get(r, np.empty(0, np.int64)) if first and regions else None
        if rows is not None and self.selected is not None:
            rows = rows_of(rows, take_rows(self.selected, rows))
        for label, s, entries in regions:
            acc = self.acc.setdefault(label, {"times": [], "comms": [], "ops": 0, "bytes": 0, "entries": 0})
            if first:
                inside = rows_of(rows, _inside(take_rows(self.a.start, rows), s))
                acc["times"].append(iv.length(s))
                acc["comms"].append(0)
                acc["ops"] += len(inside)
                acc["bytes"] += int(self.a.nbytes[inside].sum())
                acc["entries"] += entries
            acc["comms"][-1] += iv.length(iv.intersect(comm, s))


def region_table(acc: dict) -> pd.DataFrame:
    """The table of RegionFigures' accumulators (label -> times, comms per rank; ops, bytes, entries)."""
    rows = []
    for label in sorted(acc):
        a = acc[label]
        t, c = float(np.mean(a["times"])), float(np.mean(a["comms"]))
        rows.append({"region": label, "ranks": len(a["times"]), "entries": a["entries"], "time_ns": t,
                     "comm_ns": c, "comm_share": c / t if t > 0 else float("nan"), "ops": a["ops"],
                     "bytes": a["bytes"]})
    if not rows:
        return pd.DataFrame(columns=REGION_TABLE_COLUMNS, index=pd.Index([], name="region"))
    return pd.DataFrame(rows).set_index("region")[REGION_TABLE_COLUMNS]
