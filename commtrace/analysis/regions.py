"""Per user region (``commtrace.region(label)``): time, communication, ops (pure).

A region's time on a rank is the union of that rank's intervals of the region
(entered several times, or on several threads); nested regions are labelled
"outer/inner" and lie inside their outer region. Ops count when they start
inside the region; communication time is the rank's communication set
intersected with the region's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import intervals as iv
from .arrays import OpArrays

REGION_TABLE_COLUMNS = ["ranks", "entries", "time_ns", "comm_ns", "comm_share", "ops", "bytes"]


def _inside(t: np.ndarray, s: iv.IntervalSet) -> np.ndarray:
    k = np.searchsorted(s[0], t, side="right") - 1
    return (k >= 0) & (t < s[1][np.maximum(k, 0)]) if len(s[0]) else np.zeros(len(t), dtype=bool)


def region_table(regions: pd.DataFrame | None, a: OpArrays, selected: np.ndarray, comm_of: dict,
                 bounds: dict | None = None) -> pd.DataFrame:
    """One row per region label. time_ns and comm_ns: mean over the ranks that
    entered it; comm_share = comm_ns / time_ns; ops and bytes: over all ranks.
    ``comm_of``: rank -> its communication interval set; ``bounds``: the window."""
    if regions is None or len(regions) == 0:
        return pd.DataFrame(columns=REGION_TABLE_COLUMNS, index=pd.Index([], name="region"))
    rows = []
    for label, g in regions.groupby("label", sort=True):
        times, comms, ops, nbytes, entries = [], [], 0, 0, 0
        for r, gr in g.groupby("rank", sort=True):
            s = iv.union(gr["t_begin_ns"].to_numpy(np.int64), gr["t_end_ns"].to_numpy(np.int64))
            if bounds is not None:
                lo, hi = bounds.get(int(r), (0, 0))
                s = iv.clip(s, lo, hi)
            if not len(s[0]):
                continue
            entries += len(gr)
            times.append(iv.length(s))
            comms.append(iv.length(iv.intersect(comm_of.get(int(r), iv.empty()), s)))
            mine = np.flatnonzero((a.rank == r) & selected)
            inside = mine[_inside(a.start[mine], s)]
            ops += len(inside)
            nbytes += int(a.nbytes[inside].sum())
        if not times:
            continue
        t, c = float(np.mean(times)), float(np.mean(comms))
        rows.append({"region": label, "ranks": len(times), "entries": entries, "time_ns": t, "comm_ns": c,
                     "comm_share": c / t if t > 0 else float("nan"), "ops": ops, "bytes": nbytes})
    if not rows:
        return pd.DataFrame(columns=REGION_TABLE_COLUMNS, index=pd.Index([], name="region"))
    return pd.DataFrame(rows).set_index("region")[REGION_TABLE_COLUMNS]
