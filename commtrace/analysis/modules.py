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
from .arrays import NA_KEY, OpArrays, rows_of, take_rows

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

    def add(self, r: int, t) -> None:
        """Rank ``r``'s figures from its step_table.RankTime, or from each time piece of it in turn
        (RankTimes.pieces: the first opens the rank's entries and counts its ops; each adds its lengths)."""
        rows = self.a.rank_rows().get(r)
        if rows is None or not len(self.keys):
            return
        cuts = ([t.cut] if t.cut else []) + ([self.bounds.get(r, (None, None))] if self.bounds is not None else [])
        for part, opening in [(rows, True)] * t.first + [(t.rows, False)] * (t.rows is not None):
            part = part if self.selected is None else rows_of(part, take_rows(self.selected, part))
            k, nbytes = take_rows(self.key, part), take_rows(self.a.nbytes, part)     # views where rows are consecutive
            for ki in np.unique(k).tolist():
                mine = k == ki
                acc = self.acc.setdefault(self.keys[ki], {"comms": [], "exposed": [], "ops": 0, "bytes": 0})
                if opening:     # counted without gathering the key's ops (the whole rank: the task's peak)
                    acc["comms"].append(0)
                    acc["exposed"].append(0)
                    acc["ops"] += int(np.count_nonzero(mine))
                    acc["bytes"] += int(np.sum(nbytes, where=mine))
                    if t.rows is not None:
                        continue            # the pieces add the lengths
                sel = rows_of(part, mine)
                s = iv.union(self.a.start[sel], self.a.end[sel])
                for lo, hi in cuts:
                    s = s if lo is None else iv.clip(s, lo, hi)
                acc["comms"][-1] += iv.length(s)
                # s minus compute, without a set as long as compute (s's intervals are disjoint)
                acc["exposed"][-1] += iv.length(s) - int(iv.length_within(t.compute, s[0], s[1]).sum())


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
