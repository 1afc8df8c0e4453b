"""Compare runs step by step, then op by op (pure). Definitions: docs/report.md, "compare".

Per run over the window's steps: median and spread = (p75 - p25) / 2. Against BASE: delta % =
(exp - base) / base * 100, noise band % = 100 * hypot(spreads) / base median, within noise when
|delta| <= band. Then each run's summary table over the --by keys (its analysis cells) with each
figure's delta % against BASE.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import CommtraceError

STEP_STATS = ("step_ns", "compute_ns", "comm_ns", "exposed_ns", "ops", "bytes")
BREAKDOWN_STATS = ("collectives", "ops", "bytes", "mean_ns", "p50_ns", "p99_ns", "busbw")
# Frame columns a breakdown can be grouped by (times, durations and ids cannot).
GROUPABLE = ("op", "variant", "phase", "detail", "module", "region", "bucket", "params", "group", "group_desc",
             "mesh_dim", "group_size", "backend", "dtype", "shapes", "out_shapes", "bytes", "root", "tag", "reduce_op",
             "device", "async", "thread", "callsite", "status", "rank", "host", "world", "source", "end_observed", "iteration")


def spread_stats(values) -> dict:
    """median, p25, p75, spread (half the interquartile range) and n of ``values``."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return {"median": np.nan, "p25": np.nan, "p75": np.nan, "spread": np.nan, "n": 0}
    p25, med, p75 = np.percentile(v, [25, 50, 75])
    return {"median": float(med), "p25": float(p25), "p75": float(p75), "spread": float((p75 - p25) / 2),
            "n": int(len(v))}


def delta_pct(base, exp):
    """(exp - base) / base * 100; NaN where base is 0 or missing."""
    base = np.asarray(base, dtype=np.float64)
    exp = np.asarray(exp, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((base != 0) & np.isfinite(base), (exp - base) / base * 100.0, np.nan)


def step_comparison(names: list[str], acrosses: list[pd.DataFrame | None]) -> pd.DataFrame:
    """One row per (run, stat): median, p25, p75, spread, n, delta_pct, band_pct, within_noise."""
    rows = []
    stats = [{s: spread_stats(a[s] if a is not None and len(a) else []) for s in STEP_STATS}
             for a in acrosses]
    for i, (name, run_stats) in enumerate(zip(names, stats)):
        for s, st in run_stats.items():
            row = {"run": name, "stat": s, **st}
            if i:
                m = stats[0][s]["median"]
                d = float(delta_pct(m, st["median"]))
                band = (float(100.0 * np.hypot(stats[0][s]["spread"], st["spread"]) / abs(m))   # the noise band
                        if np.isfinite(m) and m != 0 else float("nan"))
                row.update(delta_pct=d, band_pct=band,
                           within_noise=bool(np.isfinite(d) and np.isfinite(band) and abs(d) <= band))
            rows.append(row)
    return pd.DataFrame(rows).set_index(["run", "stat"])


def check_by(by: list[str]) -> None:
    """Every --by key must be a groupable column (one-line error otherwise)."""
    for key in by:
        if key not in GROUPABLE:
            raise CommtraceError(f"--by {key}: not a column to group by (use any of: {', '.join(GROUPABLE)})")


def breakdown_table(names: list[str], stats: list[pd.DataFrame]) -> pd.DataFrame:
    """The breakdown from each run's summary table over the same keys (``analyse(compare_by=...)``)."""
    index = stats[0].index
    for s in stats[1:]:
        index = index.union(s.index)
    data, cols = {}, []
    base = stats[0].reindex(index)
    for i, (name, s) in enumerate(zip(names, stats)):
        s = s.reindex(index)
        for st in BREAKDOWN_STATS:
            data[(name, st)] = s[st].to_numpy(dtype=np.float64)
            cols.append((name, st))
            if i:
                data[(name, st + "_delta")] = delta_pct(base[st], s[st])
                cols.append((name, st + "_delta"))
    order = np.argsort(-np.nan_to_num(data[(names[0], "mean_ns")] * data[(names[0], "ops")], nan=-1), kind="stable")
    return pd.DataFrame(data, index=index, columns=pd.MultiIndex.from_tuples(cols)).iloc[order]


def compare_reports(named: list[tuple[str, object]], by: list[str] | None = None) -> dict:
    """``named``: [(name, report)], the first BASE -> {"runs", "steps" (step_comparison), "breakdown",
    "by", "windows" (per run its window and step counts), "busbw" (per run, every collective)}."""
    names = [n for n, _ in named]
    reports = [r for _, r in named]
    if by is None:
        by = ["phase", "op"] if any(r.by_phase is not None for r in reports) else ["op"]
    check_by(by)
    table = breakdown_table(names, [r.summary(by) for r in reports])
    windows = [{"window": r.info.get("window"), "steps_shown": r.steps.shown if r.steps is not None else 0,
                "steps_total": r.steps.total_steps if r.steps is not None else 0,
                "coverage": r.info.get("coverage")} for r in reports]
    acrosses = [r.steps.across if r.steps is not None else None for r in reports]
    return {"runs": names, "steps": step_comparison(names, acrosses), "breakdown": table, "by": by,
            "windows": windows, "busbw": [float(r.busbw) for r in reports]}
