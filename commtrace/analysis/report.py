"""The report's step tables and its JSON (``commtrace report --json``); the report itself is
``analysis.partitioned.analyse``'s."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.rank_ranges import rank_name


@dataclass
class StepTables:
    per_rank: pd.DataFrame      # one row per (rank, step) in the window
    across: pd.DataFrame        # one row per step: over the ranks that took it
    outside: pd.DataFrame       # ops of stepping ranks outside every step
    total_steps: int            # the run's steps: the most any rank took (of each world, summed over the worlds)

    @property
    def shown(self) -> int:
        return len(self.across)


def json_safe(v):
    """``v`` with JSON-safe scalars, recursively: NaN/inf/NA -> None, numpy -> python
    (arrays -> lists), dict keys -> str, tuples and sets -> lists; other values unchanged."""
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
    if isinstance(v, (list, tuple, set)):
        return [json_safe(x) for x in v]
    return v


def table_records(df: pd.DataFrame | None) -> list[dict]:
    """A summary table as a list of flat dicts (index levels become fields)."""
    if df is None or len(df) == 0:
        return []
    flat = df.reset_index()
    return [{str(k): json_safe(v) for k, v in row.items()} for row in flat.to_dict(orient="records")]


_RANK_COLUMNS = ("rank", "last_rank", "first_rank", "slowest_rank")


def _named_ranks(df: pd.DataFrame | None, name) -> pd.DataFrame | None:
    """``df`` with the rank keys of its rank columns (and index) named by ``name`` (several worlds)."""
    if name is None or df is None or not len(df):
        return df
    if df.index.name in _RANK_COLUMNS:
        df = df.set_axis(pd.Index([name(int(k)) for k in df.index], name=df.index.name))
    return df.assign(**{c: [name(int(k)) for k in df[c]] for c in _RANK_COLUMNS if c in df})


def _named_info(info: dict, name) -> dict:
    """``info`` with its rank keys named by ``name`` (a run of several worlds: "w1:r0")."""
    out = dict(info, rank_list=[name(r) for r in info["rank_list"]],
               incomplete_ranks=[name(r) for r in info["incomplete_ranks"]],
               endings={name(int(r)): v for r, v in info["endings"].items()})
    for k in ("comm_share_per_rank", "comm_ns_per_rank"):
        out[k] = {name(int(r)): v for r, v in info[k].items()}
    out["clocks"] = [dict(h, ranks=[name(r) for r in h["ranks"]],
                          per_rank=[dict(p, rank=name(p["rank"])) for p in h["per_rank"]])
                     for h in info["clocks"] or []]
    return out


def report_json(rep, by: tuple | None = None) -> dict:
    """``commtrace report --json`` of ``rep`` (fields: docs/report.md); a partitioned analysis adds
    ``"partitioned": true`` and how (executor, workers, percentiles); ``by`` (report --by: key names,
    table over them) adds ``by``, its ``keys`` and ``rows``."""
    info = dict(rep.info)
    name = (lambda k: rank_name(k, True)) if info.get("worlds") else None
    if name is not None:
        info = _named_info(info, name)
    if not rep.whole:
        info.update(run_dir=rep.path, ranks=rep.ranks, ops=rep.ops, percentiles_exact=rep.exact,
                    quantile_error=rep.quantile_error, executor=rep.executor, workers=rep.workers)
    sk = rep.skew
    top = _named_ranks(sk["top"], name)
    top_cols = ["op", "group", "seq", "ranks", "spread_ns", "last_rank", "first_rank", "first_start_ns"]
    st = rep.steps
    if by is not None:
        flat = _named_ranks(by[1].reset_index(), name)
        by = {"keys": list(by[0]), "rows": table_records(flat.set_index(list(by[1].index.names)))}
    return json_safe({
        "format": "commtrace-report", "version": 3,
        **({} if rep.whole else {"partitioned": True}),
        "run": info,
        "issues": [str(i) for i in rep.issues],
        "by_op": table_records(rep.by_op),
        "by_group": table_records(rep.by_group),
        "by_phase": table_records(rep.by_phase),
        "split_phases": table_records(rep.split),
        "steps": table_records(_named_ranks(st.across.head(100_000), name)) if st is not None else [],
        "steps_per_rank": table_records(_named_ranks(st.per_rank.head(1_000_000), name)) if st is not None else [],
        "outside_steps": table_records(st.outside) if st is not None else [],
        "regions": table_records(rep.regions),
        "by_module": table_records(rep.by_module),
        "skew": {
            "instances": sk["instances"],
            "by_op": table_records(sk["by_op"]),
            "stragglers": table_records(_named_ranks(sk["stragglers"], name)),
            "top": [{c: json_safe(r[c]) if c not in ("op", "group") else str(r[c]) for c in top_cols}
                    for _, r in top.iterrows()] if len(top) else [],
        },
        **({} if by is None else {"by": by}),
    })
