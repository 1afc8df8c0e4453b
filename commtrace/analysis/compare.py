"""Compare runs per op (and per phase when phases exist): stats and % deltas vs the base."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import float_col, group_rows
from .summary import has_values

STATS = ("count", "bytes", "mean", "p50", "p90", "p95", "p99")
_QS = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


def run_stats(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """count (ops over all ranks), bytes, mean and quantiles of duration (ns) per group."""
    if len(frame) == 0:
        return pd.DataFrame(columns=list(STATS))
    g = group_rows(frame, by)
    dur = float_col(frame["duration_ns"])
    known = ~np.isnan(dur)
    out = pd.DataFrame(index=g.index())
    out["count"] = g.count()
    out["bytes"] = g.sum(frame["bytes"].to_numpy(dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mean"] = g.sum(np.where(known, dur, 0.0)) / g.sum(known.astype(np.float64))
    qv = g.quantiles(dur, list(_QS.values()))
    for j, name in enumerate(_QS):
        out[name] = qv[:, j]
    return out


def delta_pct(base, exp):
    """(exp - base) / base * 100; NaN where base is 0 or missing."""
    base = np.asarray(base, dtype=np.float64)
    exp = np.asarray(exp, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((base != 0) & np.isfinite(base), (exp - base) / base * 100.0, np.nan)


def compare_runs(runs: list[tuple[str, pd.DataFrame]], by=None) -> dict:
    """``runs``: [(name, frame), ...], the first is the base.

    Returns {"by": [...], "runs": [names], "table": DataFrame indexed by the ``by`` keys with
    columns (run, stat) and (run, stat + "_delta") for every run after the base}.
    """
    if by is None:
        by = ["phase", "op"] if any(has_values(f, "phase") for _, f in runs) else ["op"]
    by = list(by)
    stats = [run_stats(f, by) for _, f in runs]
    index = stats[0].index
    for s in stats[1:]:
        index = index.union(s.index)
    cols, data = [], {}
    base = stats[0].reindex(index)
    for i, ((name, _), s) in enumerate(zip(runs, stats)):
        s = s.reindex(index)
        for st in STATS:
            data[(name, st)] = s[st].to_numpy(dtype=np.float64)
            cols.append((name, st))
            if i:
                data[(name, st + "_delta")] = delta_pct(base[st], s[st])
                cols.append((name, st + "_delta"))
    table = pd.DataFrame(data, index=index, columns=pd.MultiIndex.from_tuples(cols))
    return {"by": by, "runs": [n for n, _ in runs], "table": table}
