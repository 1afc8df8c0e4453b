"""The regions table (``commtrace.region``; analysis.regions) and the per-module table
(analysis.modules) from per-rank parts.

A region's figures on a rank need only that rank's ops, communication set and
region intervals, so the rank task builds its rank's ``RegionFigures`` (the
one-frame report's class) and returns its accumulators; the reduce concatenates
them in rank order and makes the same table."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import intervals as iv
from ..arrays import OpArrays
from ..modules import ModuleFigures, module_table
from ..regions import RegionFigures, region_table


class RankRegions(RegionFigures):
    """One rank's RegionFigures (``applied``: its window, analysis.window.Applied; None: the whole
    run); ``add_without_ops``: the rank has compute spans but no op (its regions count no communication)."""

    def __init__(self, regions: pd.DataFrame | None, a: OpArrays | None, applied=None):
        super().__init__(regions, a if a is not None else no_ops(), applied.selected if applied is not None else None,
                         applied.bounds if applied is not None else None)

    def add_without_ops(self, spans: pd.DataFrame | None) -> None:
        if spans is not None and len(spans):
            for r in sorted(set(spans["rank"].astype(int).tolist())):
                self.add(r, iv.empty())


def no_ops() -> OpArrays:
    i64 = np.empty(0, np.int64)
    return OpArrays(rank=np.empty(0, np.int32), start=i64, end=i64, dur=np.empty(0, np.float64), nbytes=i64)


def regions_table(per_rank: dict) -> pd.DataFrame:
    """The regions table from rank -> RegionFigures.acc (as RegionFigures.table over every rank)."""
    return region_table(_folded(per_rank, str, ("times", "comms"), ("ops", "bytes", "entries")))


def rank_modules(ops, applied=None) -> ModuleFigures | None:
    """One rank's ModuleFigures (the one-frame report's class), None when no op names a module."""
    if ops is None or ops.mkey is None:
        return None
    return ModuleFigures(ops.arrays, ops.mkey, ops.mkeys, applied.selected if applied is not None else None,
                         applied.bounds if applied is not None else None)


def modules_table(per_rank: dict) -> pd.DataFrame | None:
    """The per-module table from rank -> ModuleFigures.acc (as ModuleFigures.table over every rank)."""
    return module_table(_folded(per_rank, tuple, ("comms", "exposed"), ("ops", "bytes")))


def _folded(per_rank: dict, key, lists: tuple, counts: tuple) -> dict:
    """The ranks' accumulators (rank -> {row key: its figures}) folded in rank order: per ``key(row key)``
    (a module's (module, phase) may travel as a list) the ``lists`` of per-rank values joined, ``counts`` added."""
    into: dict = {}
    for r in sorted(per_rank):
        for k, acc in per_rank[r].items():
            cur = into.setdefault(key(k), {**{n: [] for n in lists}, **{n: 0 for n in counts}})
            for n in lists:
                cur[n].extend(acc[n])
            for n in counts:
                cur[n] += acc[n]
    return into
