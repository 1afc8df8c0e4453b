"""Figures the HTML report plots that no table holds (pure). Definitions: docs/report.md, "HTML report"."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import intervals as iv
from .arrays import OpArrays
from .match import Matched
from .step_table import RankTimes
from .summary import bandwidth_terms, bus_factors, flags_of

STEP_PARTS = ("compute_only_ns", "hidden_ns", "exposed_ns", "other_ns")


def step_breakdown(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, step): step_ns cut into disjoint parts summing to it (each clipped at 0): hidden =
    comm - exposed (inside compute), compute_only = compute - hidden, exposed, other = the rest."""
    cols = ["rank", "step", "step_ns", *STEP_PARTS]
    if per_rank is None or not len(per_rank):
        return pd.DataFrame(columns=cols)
    step, comm, exposed, compute = (per_rank[c].to_numpy(np.float64)
                                    for c in ("step_ns", "comm_ns", "exposed_ns", "compute_ns"))
    hidden = np.clip(comm - exposed, 0, None)
    compute_only = np.clip(compute - hidden, 0, None)
    other = np.clip(step - compute_only - hidden - exposed, 0, None)
    return pd.DataFrame({"rank": per_rank["rank"].to_numpy(), "step": per_rank["step"].to_numpy(), "step_ns": step,
                         "compute_only_ns": compute_only, "hidden_ns": hidden, "exposed_ns": exposed,
                         "other_ns": other}, columns=cols)


def steps_across_ranks(parts: pd.DataFrame) -> pd.DataFrame:
    """Per step of ``step_breakdown``'s rows: ranks, each part's mean over them, step time mean/min/max."""
    cols = ["ranks", *STEP_PARTS, "step_ns", "min_step_ns", "max_step_ns"]
    if not len(parts):
        return pd.DataFrame(columns=cols, index=pd.Index([], name="step"))
    g = parts.groupby("step", sort=True)
    out = g[[*STEP_PARTS, "step_ns"]].mean()
    out["ranks"] = g.size()
    out["min_step_ns"] = g["step_ns"].min()
    out["max_step_ns"] = g["step_ns"].max()
    return out[cols]


def steady_start(per_rank: pd.DataFrame) -> int | None:
    """The second step number present (the first carries one-off set-up and warm-up); None: < 2 steps."""
    if per_rank is None or not len(per_rank):
        return None
    numbers = np.unique(per_rank["step"].to_numpy(np.int64))
    return int(numbers[1]) if len(numbers) >= 2 else None


def exposure_intervals(frame: pd.DataFrame, arrays: OpArrays, spans: pd.DataFrame | None,
                       bounds: dict | None = None) -> pd.DataFrame:
    """rank, t_begin_ns, t_end_ns, exposed: each rank's communication cut into exposed and hidden
    intervals -- the sets the step table's ``exposed`` and ``comm - exposed`` measure."""
    times = RankTimes(frame, arrays, spans, None, bounds)
    parts = []
    for r in times.ranks():
        t = times.of(r)
        hidden = iv.intersect(t.comm, t.compute)
        for (b, e), exposed in ((t.exposed, True), (hidden, False)):
            if len(b):
                parts.append(pd.DataFrame({"rank": np.full(len(b), r, np.int64), "t_begin_ns": b, "t_end_ns": e,
                                           "exposed": np.full(len(b), exposed)}))
    if not parts:
        return pd.DataFrame({"rank": np.empty(0, np.int64), "t_begin_ns": np.empty(0, np.int64),
                             "t_end_ns": np.empty(0, np.int64), "exposed": np.empty(0, bool)})
    return pd.concat(parts, ignore_index=True).sort_values(["rank", "t_begin_ns"], kind="stable",
                                                          ignore_index=True)


def binned_majority(sets: list, lo: int, hi: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Per bin of [lo, hi) cut in ``bins``: which interval set covers most of it (-1: none; ties:
    the first) and the fraction it covers."""
    bins = max(int(bins), 1)
    edges = np.linspace(int(lo), int(hi), bins + 1).round().astype(np.int64)
    width = np.maximum(np.diff(edges), 1)
    if not sets:
        return np.full(bins, -1, np.int64), np.zeros(bins)
    cover = np.stack([np.diff(iv.covered_before(s, edges)) for s in sets])
    best = cover.argmax(axis=0).astype(np.int64)
    top = cover.max(axis=0)
    best[top <= 0] = -1
    return best, np.minimum(top / width, 1.0)


def slowest_steps(across: pd.DataFrame, limit: int) -> list[int]:
    """The step numbers to draw: all, else the ``limit`` slowest (step time across ranks), in order."""
    if across is None or not len(across):
        return []
    if len(across) <= limit:
        return [int(s) for s in across.index]
    return sorted(int(s) for s in across["step_ns"].nlargest(max(limit, 1)).index)


def arrival_offsets(frame: pd.DataFrame, matched: Matched, limit: int) -> dict:
    """Ranks x collectives: start minus the first caller's (ns; NaN: not a caller), for the first
    ``limit`` (time order) collectives of two or more callers: {"ranks", "first_start_ns", "op",
    "seq", "offset_ns" (2-D), "collectives": how many there are in all}."""
    inst = matched.instances
    inst = inst[~inst["p2p"].to_numpy(dtype=bool) & (inst["ranks"].to_numpy() >= 2)] if len(inst) else inst
    total = int(len(inst))
    inst = inst.sort_values("first_start_ns", kind="stable").head(max(int(limit), 0))
    ranks = sorted(int(r) for r in np.unique(frame["rank"].to_numpy())) if len(frame) else []
    out = np.full((len(ranks), len(inst)), np.nan)
    if len(inst) and ranks:
        col_of = np.full(len(matched.instances), -1, dtype=np.int64)
        col_of[inst.index.to_numpy()] = np.arange(len(inst))
        rows = np.flatnonzero(col_of[matched.inst] >= 0)
        col = col_of[matched.inst[rows]]
        lane = np.searchsorted(np.array(ranks), frame["rank"].to_numpy()[rows])
        start = frame["t_start_ns"].to_numpy(np.int64)[rows]
        out[lane, col] = start - inst["first_start_ns"].to_numpy(np.int64)[col]
    return {"ranks": ranks, "first_start_ns": inst["first_start_ns"].to_numpy(np.int64),
            "op": inst["op"].astype(str).tolist(), "seq": inst["seq"].to_numpy(np.int64),
            "offset_ns": out, "collectives": total}


def bandwidth_by_size(matched: Matched) -> pd.DataFrame:
    """Per (op, size, one_rank, observed): collectives, algbw and busbw of the collectives (bytes/s, as
    in ``summary``). ``one_rank``: 1-rank groups (a copy, nothing crosses a link); ``observed``: an op's
    end is an observed upper bound (the instance's ``observed``), so the bandwidth is too low."""
    cols = ["op", "size_bytes", "one_rank", "observed", "collectives", "algbw", "busbw"]
    inst = matched.instances
    if not len(inst):
        return pd.DataFrame(columns=cols)
    inst = inst[~inst["p2p"].to_numpy(dtype=bool)]
    T, S, SB, observed, _ = bandwidth_terms(inst["slowest_ns"].to_numpy(np.float64),
                                            inst["size_bytes"].to_numpy(np.float64), bus_factors(inst), *flags_of(inst))
    ok = T > 0      # as summary counts them: T and S known and positive
    if not ok.any():
        return pd.DataFrame(columns=cols)
    part = pd.DataFrame({"op": inst["op"].astype(str).to_numpy()[ok], "size_bytes": S[ok].astype(np.int64),
                         "one_rank": inst["expected"].to_numpy(np.int64)[ok] <= 1, "observed": observed[ok] > 0,
                         "T": T[ok], "S": S[ok], "SB": SB[ok]})
    g = part.groupby(["op", "size_bytes", "one_rank", "observed"], sort=True)
    sums = g[["T", "S", "SB"]].sum()
    out = pd.DataFrame({"collectives": g.size(), "algbw": sums["S"] / (sums["T"] * 1e-9),
                        "busbw": sums["SB"] / (sums["T"] * 1e-9)}).reset_index()
    return out[cols]
