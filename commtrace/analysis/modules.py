"""Per module and phase: ops, bytes, communication and exposed communication (pure).

An op belongs to the (module, phase) it was called in (capture.module_tracker: the innermost running
nn.Module by its name from the root; DDP's ops: the DDP module's label). Per rank, a key's comm is
the union of its ops (in the window), exposed the part no compute (the step table's set) covers; the
table sums ops and bytes over ranks and averages comm_ns / exposed_ns over the ranks with ops of it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import intervals as iv
from .arrays import NA_KEY, OpArrays

MODULE_TABLE_COLUMNS = ["ranks", "ops", "bytes", "comm_ns", "exposed_ns", "exposed_share"]


def module_keys(frame: pd.DataFrame) -> tuple[np.ndarray, list]:
    """Per row of ``frame``: an index into the returned list of (module, phase) keys
    ("-" where a row has none)."""
    cols = []
    for c in ("module", "phase"):
        if c in frame and isinstance(frame[c].dtype, pd.CategoricalDtype):
            cols.append((frame[c].cat.codes.to_numpy().astype(np.int64), [str(x) for x in frame[c].cat.categories]))
        else:
            cols.append((np.full(len(frame), -1, np.int64), []))
    (mc, mn), (pc, pn) = cols
    combined = (mc + 1) * (len(pn) + 1) + (pc + 1)
    uniq, inv = np.unique(combined, return_inverse=True)
    keys = []
    for v in uniq.tolist():
        m, p = divmod(v, len(pn) + 1)
        keys.append((mn[m - 1] if m else NA_KEY, pn[p - 1] if p else NA_KEY))
    return inv.reshape(-1).astype(np.int64), keys


class ModuleFigures:
    """The per-module table. ``key``: per op of ``a``, an index into ``keys`` ((module,
    phase)); ``add`` each rank's times (step_table.RankTime), then ``module_table(acc)``."""

    def __init__(self, a: OpArrays, key: np.ndarray, keys: list, selected: np.ndarray | None = None,
                 bounds: dict | None = None):
        self.a, self.key, self.keys, self.selected, self.bounds = a, key, keys, selected, bounds
        self.acc: dict = {}   # (module, phase) -> {"comms": [per rank], "exposed": [...], "ops": n, "bytes": n}

    def add(self, r: int, compute: iv.IntervalSet) -> None:
        rows = self.a.rank_rows().get(r)
        if rows is None or not len(self.keys):
            return
        if self.selected is not None:
            rows = rows[self.selected[rows]]
        k = self.key[rows]
        lo, hi = self.bounds.get(r, (None, None)) if self.bounds is not None else (None, None)
        for ki in np.unique(k).tolist():
            sel = rows[k == ki]
            s = iv.union(self.a.start[sel], self.a.end[sel])
            if lo is not None:
                s = iv.clip(s, lo, hi)
            acc = self.acc.setdefault(self.keys[ki], {"comms": [], "exposed": [], "ops": 0, "bytes": 0})
            acc["comms"].append(iv.length(s))
            acc["exposed"].append(iv.length(iv.subtract(s, compute)))
            acc["ops"] += len(sel)
            acc["bytes"] += int(self.a.nbytes[sel].sum())


def merge_module_acc(into: dict, acc: dict) -> None:
    """Fold one ModuleFigures' ``acc`` (e.g. one rank's) into ``into``."""
    for key, a in acc.items():
        cur = into.setdefault(tuple(key), {"comms": [], "exposed": [], "ops": 0, "bytes": 0})
        cur["comms"].extend(a["comms"])
        cur["exposed"].extend(a["exposed"])
        cur["ops"] += a["ops"]
        cur["bytes"] += a["bytes"]


def module_table(acc: dict) -> pd.DataFrame | None:
    """One row per (module, phase), sorted by communication time (descending); None when no
    op names a module (a run without DDP, FSDP or tensor parallelism shows no such table)."""
    if not any(module != NA_KEY for module, _ in acc):
        return None
    rows = []
    for (module, phase), a in acc.items():
        c, e = float(np.mean(a["comms"])), float(np.mean(a["exposed"]))
        rows.append({"module": module, "phase": phase, "ranks": len(a["comms"]), "ops": a["ops"],
                     "bytes": a["bytes"], "comm_ns": c, "exposed_ns": e,
                     "exposed_share": e / c if c > 0 else float("nan")})
    df = pd.DataFrame(rows).sort_values(["comm_ns", "module", "phase"], ascending=[False, True, True], kind="stable")
    return df.set_index(["module", "phase"])[MODULE_TABLE_COLUMNS]
