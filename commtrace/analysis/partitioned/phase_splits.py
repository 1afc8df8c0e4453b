"""Collectives whose ranks filed their ops under different phases (the per-phase table's
note; docs/report.md) from the partitions: a partition holds every op of its
instances, so it finds its split ones; the reduce puts them in time order."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..summary import SPLIT_COLUMNS

ORDER = ["first_start_ns", "first_rank"]


def split_instances(cell: np.ndarray, cell_ids: dict, inst: np.ndarray, first: np.ndarray, rank: np.ndarray,
                    t: np.ndarray, op_of_inst: np.ndarray, group_of_inst: np.ndarray,
                    seq_of_inst: np.ndarray) -> pd.DataFrame | None:
    """One partition's split instances (``first``: each instance's first op; ``cell_ids``: the
    partition's cell keys (rank_ops.CELL_COLUMNS) -> id, giving each op's phase); None when
    its ops name one phase (or none)."""
    keys = sorted(cell_ids, key=cell_ids.get)
    phases = sorted({k[2] for k in keys})
    if len(phases) < 2:
        return None
    phase_of_cell = np.array([phases.index(k[2]) for k in keys], np.int64)
    code = phase_of_cell[cell]
    differs = code != code[first[inst]]
    if not differs.any():
        return pd.DataFrame(columns=SPLIT_COLUMNS + ORDER)
    bad = np.unique(inst[differs])
    rows = np.flatnonzero(np.isin(inst, bad))
    part = pd.DataFrame({"inst": inst[rows], "value": np.asarray(phases, dtype=object)[code[rows]],
                         "rank": rank[rows]})
    out = []
    for i, g in part.groupby("inst", sort=True):
        by_value = g.groupby("value", sort=True)["rank"].apply(lambda r: ",".join(map(str, sorted(set(r)))))
        f = first[int(i)]
        out.append({"op": str(op_of_inst[i]), "group": str(group_of_inst[i]), "seq": int(seq_of_inst[i]),
                    "by_rank": "; ".join(f"{v}: {rk}" for v, rk in by_value.items()),
                    "first_start_ns": int(t[f]), "first_rank": int(rank[f])})
    return pd.DataFrame(out, columns=SPLIT_COLUMNS + ORDER)


def split_table(parts: list) -> pd.DataFrame:
    """Every partition's split instances, in time order (first caller's start, then rank)."""
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return pd.DataFrame(columns=SPLIT_COLUMNS)
    t = pd.concat(parts, ignore_index=True).sort_values(ORDER, kind="stable")
    return t[SPLIT_COLUMNS].reset_index(drop=True)
