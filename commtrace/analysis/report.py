"""Everything ``commtrace report`` shows, computed once from a loaded run."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .arrays import OpArrays
from .match import Matched, match_ops
from .overlap import backward_overlap
from .run_info import ReportRun, run_info
from .skew import skew_summary
from .summary import has_values, iteration_summary, op_summary, summary_cells


@dataclass
class Report:
    run: ReportRun
    info: dict
    by_op: pd.DataFrame
    by_group: pd.DataFrame
    by_phase: pd.DataFrame | None
    by_iteration: pd.DataFrame | None
    skew: dict
    matched: Matched
    arrays: OpArrays
    issues: list[str] = field(default_factory=list)


def build_report(run: ReportRun, top: int = 10) -> Report:
    df = run.frame
    a = OpArrays.of(df)
    info = run_info(run, a)
    m = match_ops(df, a)
    cells = summary_cells(df, [c for c in ("group", "group_desc", "phase", "op") if c in df], a) if len(df) else None
    by_op = op_summary(df, m, ("op",), a, cells=cells)
    by_group = op_summary(df, m, ("group", "group_desc", "op"), a, cells=cells) if len(df) else by_op.iloc[0:0]
    by_phase = op_summary(df, m, ("phase", "op"), a, cells=cells) if has_values(df, "phase") else None
    del cells
    by_it = iteration_summary(df, a) if len(df) and (df["iteration"].to_numpy() > 0).any() else None
    if by_it is not None:
        ov = backward_overlap(df, run.spans)
        if len(ov):
            by_it = by_it.join(ov, how="left")
    sk = skew_summary(m, top)
    return Report(run, info, by_op, by_group, by_phase, by_it, sk, m, a, list(run.issues))


def _clean(v):
    """JSON-safe scalar: NaN/inf -> None, numpy -> python."""
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def table_records(df: pd.DataFrame | None) -> list[dict]:
    """A summary table as a list of flat dicts (index levels become fields)."""
    if df is None or len(df) == 0:
        return []
    flat = df.reset_index()
    return [{str(k): _clean(v) for k, v in row.items()} for row in flat.to_dict(orient="records")]


def report_json(rep: Report) -> dict:
    """The summary numbers, for scripts (``commtrace report --json``)."""
    info = {k: v for k, v in rep.info.items()}
    sk = rep.skew
    top = sk["top"]
    top_cols = ["op", "group", "seq", "ranks", "spread_ns", "last_rank", "first_rank", "first_start_ns"]
    return _clean({
        "format": "commtrace-report", "version": 1,
        "run": info,
        "issues": rep.issues,
        "by_op": table_records(rep.by_op),
        "by_group": table_records(rep.by_group),
        "by_phase": table_records(rep.by_phase),
        "by_iteration": table_records(rep.by_iteration.head(10_000) if rep.by_iteration is not None else None),
        "skew": {
            "instances": sk["instances"],
            "by_op": table_records(sk["by_op"]),
            "stragglers": table_records(sk["stragglers"]),
            "top": [{c: _clean(r[c]) if c not in ("op", "group") else str(r[c]) for c in top_cols}
                    for _, r in top.iterrows()] if len(top) else [],
        },
    })
