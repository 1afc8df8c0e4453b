"""Everything ``commtrace report`` shows, computed once from a loaded run and a window."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import CommtraceError
from . import intervals as iv
from .arrays import OpArrays
from .match import Matched, match_ops
from .modules import ModuleFigures, has_modules, module_keys
from .regions import RegionFigures
from .run_info import ReportRun, run_info
from .skew import skew_summary
from .step_table import OutsideSteps, RankTimes, StepFigures, across_ranks
from .steps import find_steps, locate_ops
from .summary import has_values, op_summary, split_collectives, summary_cells
from .window import Applied, Window, apply, check_steps, in_bounds, take_rows


@dataclass
class StepTables:
    per_rank: pd.DataFrame      # one row per (rank, step) in the window
    across: pd.DataFrame        # one row per step: over the ranks that took it
    outside: pd.DataFrame       # ops of stepping ranks outside every step
    total_steps: int            # the highest step number of the run (most any rank took)

    @property
    def shown(self) -> int:
        return len(self.across)


@dataclass
class Report:
    run: ReportRun
    window: Window
    info: dict
    frame: pd.DataFrame         # the ops in the window
    arrays: OpArrays            # of ``frame``
    matched: Matched            # of ``frame``
    by_op: pd.DataFrame
    by_group: pd.DataFrame
    by_phase: pd.DataFrame | None
    split: pd.DataFrame         # collectives whose ranks filed them under different phases
    steps: StepTables | None
    regions: pd.DataFrame
    spans: pd.DataFrame         # compute spans overlapping the window
    marks: pd.DataFrame         # user marks inside the window
    region_spans: pd.DataFrame  # user region intervals overlapping the window
    skew: dict
    bounds: dict | None         # the window per rank: rank -> (lo, hi) ns; None = the whole run
    issues: list = field(default_factory=list)   # reader.TraceIssue (str(): its warning line)
    by_module: pd.DataFrame | None = None        # per (module, phase) (analysis.modules); None: no module named


PHASE_KEYS = ("phase", "op", "detail")


def check_phases(frame: pd.DataFrame, window: Window) -> None:
    """--phase names must exist in the run (else the report would be silently empty)."""
    if window.phases is None:
        return
    known = set(frame["phase"].dropna().astype(str).unique()) if "phase" in frame and len(frame) else set()
    known.add("-")
    unknown = [p for p in window.phases if p not in known]
    if unknown:
        have = ", ".join(sorted(known)) if known else "none"
        raise CommtraceError(f"--phase {','.join(unknown)}: no op of this run has that phase (phases: {have}; "
                             "'-' = ops without a phase)")


def build_report(run: ReportRun, window: Window | None = None, top: int = 10) -> Report:
    window = window or Window()
    full = run.frame
    a_full = OpArrays.of(full)
    check_phases(full, window)
    t0 = int(a_full.start.min()) if len(a_full.start) else None
    steps = find_steps(run.spans, a_full)
    check_steps(window, *((int(steps["step"].min()), int(steps["step"].max())) if len(steps) else (None, None)))
    applied: Applied = apply(window, full, a_full, steps, t0)
    op_step, where = locate_ops(a_full, steps)
    # One pass over the ranks: each rank's interval sets are built, used by every
    # table that needs them, and dropped before the next rank's.
    step_figures = StepFigures(steps[applied.steps_in].reset_index(drop=True), a_full, op_step, applied.selected)
    outside = OutsideSteps(steps)
    region_figures = RegionFigures(run.regions, a_full, applied.selected, applied.bounds)
    module_figures = ModuleFigures(a_full, *module_keys(full), applied.selected, applied.bounds) \
        if has_modules(full) else None
    times = RankTimes(full, a_full, run.spans, applied.selected, applied.bounds)
    comm = {}
    for r in times.ranks():
        t = times.of(r)
        comm[r] = iv.length(t.comm)
        step_figures.add(r, t)
        outside.add(r, t)
        region_figures.add(r, t.comm)
        if module_figures is not None:
            module_figures.add(r, t.compute)
    del times
    step_tables = None
    if len(steps):
        per_rank = step_figures.table()
        step_tables = StepTables(per_rank, across_ranks(per_rank), outside.table(a_full, where, applied.selected),
                                 int(steps["step"].max()))
    del op_step, where, step_figures
    df = take_rows(full, applied.selected)
    a = a_full if df is full else OpArrays.of(df)
    info = run_info(run, a, frame=df, t0=t0, comm_ns_per_rank=comm,
                    window_ns_per_rank=_window_lengths(applied, a_full, run))
    info["window"] = window.describe()
    m = match_ops(df, a)
    phase_keys = [c for c in PHASE_KEYS if c in df and (c != "detail" or has_values(df, c))]
    cells = summary_cells(df, [c for c in ("group", "group_desc", *phase_keys) if c in df], a) if len(df) else None
    by_op = op_summary(df, m, ("op",), a, cells=cells)
    by_group = op_summary(df, m, ("group", "group_desc", "op"), a, cells=cells) if len(df) else by_op.iloc[0:0]
    by_phase = op_summary(df, m, phase_keys, a, cells=cells) if has_values(df, "phase") else None
    split = split_collectives(df, m, "phase") if by_phase is not None else split_collectives(df.iloc[0:0], m, "phase")
    del cells
    spans = _within(run.spans, applied, "t_begin_ns", "t_end_ns")
    marks = _within(run.marks, applied, "t_ns", "t_ns")
    region_spans = _within(run.regions, applied, "t_begin_ns", "t_end_ns")
    regions = region_figures.table()
    sk = skew_summary(m, top)
    return Report(run, window, info, df, a, m, by_op, by_group, by_phase, split, step_tables, regions, spans, marks,
                  region_spans, sk, applied.bounds, list(run.issues),
                  module_figures.table() if module_figures is not None else None)


def _within(table: pd.DataFrame | None, applied: Applied, begin: str, end: str) -> pd.DataFrame:
    if table is None or len(table) == 0 or applied.bounds is None:
        return table if table is not None else pd.DataFrame()
    keep = in_bounds(table["rank"].to_numpy(), table[begin].to_numpy(np.int64), table[end].to_numpy(np.int64),
                     applied.bounds)
    return table[keep].reset_index(drop=True)


def _window_lengths(applied: Applied, a: OpArrays, run: ReportRun) -> dict | None:
    """Per rank, the length of its window, cut to the run's first op .. last op end
    (None for the whole run: the banner then uses each rank's wall time)."""
    if applied.bounds is None:
        return None
    lo_run = int(a.start.min()) if len(a.start) else 0
    hi_run = int(a.end.max()) if len(a.end) else 0
    if run.spans is not None and len(run.spans):
        lo_run = min(lo_run, int(run.spans["t_begin_ns"].min()))
        hi_run = max(hi_run, int(run.spans["t_end_ns"].max()))
    return {r: max(0, min(hi, hi_run) - max(lo, lo_run)) for r, (lo, hi) in applied.bounds.items()}


def json_safe(v):
    """``v`` with JSON-safe scalars, recursively: NaN/inf/NA -> None, numpy -> python
    (arrays -> lists), dict keys -> str, tuples -> lists; other values unchanged."""
    if isinstance(v, np.ndarray):
        return [json_safe(x) for x in v.tolist()]
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
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def table_records(df: pd.DataFrame | None) -> list[dict]:
    """A summary table as a list of flat dicts (index levels become fields)."""
    if df is None or len(df) == 0:
        return []
    flat = df.reset_index()
    return [{str(k): json_safe(v) for k, v in row.items()} for row in flat.to_dict(orient="records")]


def report_json(rep) -> dict:
    """The summary numbers of report ``rep`` (analysis.partitioned.analyse), for scripts
    (``commtrace report --json``); docs/report.md lists the fields. A run analysed in
    partitions adds ``"partitioned": true`` and how (executor, workers, percentiles)."""
    info = dict(rep.info)
    if not rep.whole:
        info.update(run_dir=rep.path, ranks=rep.ranks, ops=rep.ops, percentiles_exact=rep.exact,
                    quantile_error=rep.quantile_error, executor=rep.executor, workers=rep.workers)
    sk = rep.skew
    top = sk["top"]
    top_cols = ["op", "group", "seq", "ranks", "spread_ns", "last_rank", "first_rank", "first_start_ns"]
    st = rep.steps
    return json_safe({
        "format": "commtrace-report", "version": 3,
        **({} if rep.whole else {"partitioned": True}),
        "run": info,
        "issues": [str(i) for i in rep.issues],
        "by_op": table_records(rep.by_op),
        "by_group": table_records(rep.by_group),
        "by_phase": table_records(rep.by_phase),
        "split_phases": table_records(rep.split),
        "steps": table_records(st.across.head(100_000)) if st is not None else [],
        "steps_per_rank": table_records(st.per_rank.head(1_000_000)) if st is not None else [],
        "outside_steps": table_records(st.outside) if st is not None else [],
        "regions": table_records(rep.regions),
        "by_module": table_records(rep.by_module),
        "skew": {
            "instances": sk["instances"],
            "by_op": table_records(sk["by_op"]),
            "stragglers": table_records(sk["stragglers"]),
            "top": [{c: json_safe(r[c]) if c not in ("op", "group") else str(r[c]) for c in top_cols}
                    for _, r in top.iterrows()] if len(top) else [],
        },
    })
