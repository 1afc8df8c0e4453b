"""Per step and rank: step time, compute, communication, exposed communication (pure).

Definitions (docs/report.md, "Time"):

* **communication time** of a rank in a window: the length of the union of its
  ops' [start, end] intervals inside the window (overlapping ops count once);
* **compute** of a rank: the union of its compute spans (DDP forward, backward
  pass, optimizer step) minus the intervals in which it waited for
  communication: every op from its call to its return to the caller; ops the
  caller waits for where it issues them (``async_op=False``, and DDP's and
  Join's own collectives, i.e. ops with a ``detail``) until their end; and, in a
  backward pass with DDP gradient buckets, from the last bucket's launch to the
  end of the pass (DDP's reducer waits there for every bucket);
* **exposed communication**: the part of the communication time not covered by
  compute; **hidden** = communication - exposed.

So exposed <= communication <= window length and compute + exposed <= window
length, for any window.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import intervals as iv
from .arrays import OpArrays, int_or
from .steps import AFTER, BEFORE, BETWEEN, NO_STEPS, OUTSIDE_NAMES

PER_RANK_COLUMNS = ["rank", "step", "t_begin_ns", "t_end_ns", "micro_steps", "step_ns", "compute_ns",
                    "comm_ns", "exposed_ns", "ops", "bytes"]
ACROSS_COLUMNS = ["ranks", "micro_steps", "step_ns", "compute_ns", "comm_ns", "exposed_ns", "ops", "bytes",
                  "slowest_rank"]
OUTSIDE_COLUMNS = ["ops", "bytes", "comm_ns", "ranks"]


@dataclass
class RankTime:
    comm: iv.IntervalSet      # union of the rank's selected ops, inside its window
    compute: iv.IntervalSet   # compute spans minus waits (all the rank's ops)

    @property
    def exposed(self) -> iv.IntervalSet:
        return iv.subtract(self.comm, self.compute)


def _bool_col(frame: pd.DataFrame, name: str, default: bool) -> np.ndarray:
    if name not in frame:
        return np.full(len(frame), default)
    return frame[name].to_numpy(dtype=bool, na_value=default) if frame[name].dtype != bool \
        else frame[name].to_numpy()


def waits(frame: pd.DataFrame, a: OpArrays) -> tuple[np.ndarray, np.ndarray]:
    """Per op: the interval its caller spent waiting for it (start, end)."""
    ret = int_or(frame["t_return_ns"], a.start) if "t_return_ns" in frame else a.start
    ret = np.clip(np.asarray(ret, dtype=np.int64), a.start, a.end)
    in_place = ~_bool_col(frame, "async", True)
    if "detail" in frame:
        in_place |= frame["detail"].notna().to_numpy()
    return a.start, np.where(in_place, a.end, ret)


def _ddp_gradient_tails(frame: pd.DataFrame, a: OpArrays, rows: np.ndarray,
                        bw_begin: np.ndarray, bw_end: np.ndarray) -> iv.IntervalSet:
    """[last gradient bucket launch, end of the backward pass] per backward pass
    of one rank that launched DDP gradient buckets."""
    if "bucket" not in frame or not len(bw_begin):
        return iv.empty()
    grad = frame["bucket"].notna().to_numpy()[rows]
    if "phase" in frame:
        grad &= (frame["phase"].to_numpy(dtype=object, na_value=None)[rows] == "backward")
    gs = a.start[rows][grad]
    if not len(gs):
        return iv.empty()
    order = np.argsort(bw_begin, kind="stable")
    b, e = bw_begin[order], bw_end[order]
    k = np.searchsorted(b, gs, side="right") - 1
    ok = (k >= 0) & (gs <= e[np.maximum(k, 0)])
    last = np.full(len(b), np.iinfo(np.int64).min)
    np.maximum.at(last, k[ok], gs[ok])
    has = last > np.iinfo(np.int64).min
    return iv.union(last[has], e[has])


def rank_times(frame: pd.DataFrame, a: OpArrays, spans: pd.DataFrame | None, selected: np.ndarray | None = None,
               windows: dict | None = None) -> dict[int, RankTime]:
    """Per rank: its communication set (``selected`` rows, clipped to ``windows[rank]``
    = (lo, hi) when given) and its compute set (from every op of the rank)."""
    out: dict[int, RankTime] = {}
    ranks = np.unique(a.rank)
    if spans is not None and len(spans):
        ranks = np.union1d(ranks, spans["rank"].to_numpy(dtype=np.int64)).astype(np.int64)
    ws, we = waits(frame, a) if len(frame) else (a.start, a.end)
    sel = np.ones(len(a.rank), dtype=bool) if selected is None else selected
    for r in ranks.tolist():
        rows = np.flatnonzero(a.rank == r)
        comm = iv.union(a.start[rows[sel[rows]]], a.end[rows[sel[rows]]])
        if windows is not None:
            lo, hi = windows.get(r, (0, 0))
            comm = iv.clip(comm, lo, hi)
        compute = iv.empty()
        if spans is not None and len(spans):
            sp = spans[spans["rank"].to_numpy() == r]
            busy = iv.union(sp["t_begin_ns"].to_numpy(np.int64), sp["t_end_ns"].to_numpy(np.int64))
            bw = sp[sp["phase"].to_numpy() == "backward"]
            tails = _ddp_gradient_tails(frame, a, rows, bw["t_begin_ns"].to_numpy(np.int64),
                                        bw["t_end_ns"].to_numpy(np.int64))
            waited = iv.union(np.concatenate((ws[rows], tails[0])), np.concatenate((we[rows], tails[1])))
            compute = iv.subtract(busy, waited)
        out[int(r)] = RankTime(comm, compute)
    return out


def per_rank_steps(steps: pd.DataFrame, times: dict[int, RankTime], a: OpArrays, op_step: np.ndarray,
                   selected: np.ndarray | None = None) -> pd.DataFrame:
    """One row per (rank, step) with the figures of that rank in that step."""
    if len(steps) == 0:
        return pd.DataFrame(columns=PER_RANK_COLUMNS)
    out = steps[["rank", "step", "t_begin_ns", "t_end_ns", "micro_steps"]].copy()
    lo = out["t_begin_ns"].to_numpy(np.int64)
    hi = out["t_end_ns"].to_numpy(np.int64)
    n = len(out)
    compute = np.zeros(n, np.int64)
    comm = np.zeros(n, np.int64)
    exposed = np.zeros(n, np.int64)
    srank = out["rank"].to_numpy()
    for r in np.unique(srank).tolist():
        rows = np.flatnonzero(srank == r)
        t = times.get(int(r))
        if t is None:
            continue
        compute[rows] = iv.length_within(t.compute, lo[rows], hi[rows])
        comm[rows] = iv.length_within(t.comm, lo[rows], hi[rows])
        exposed[rows] = iv.length_within(t.exposed, lo[rows], hi[rows])
    out["step_ns"] = hi - lo
    out["compute_ns"] = compute
    out["comm_ns"] = comm
    out["exposed_ns"] = exposed
    # ops and bytes: the rank's selected ops that start inside the step.
    sel = np.ones(len(op_step), dtype=bool) if selected is None else selected
    key = pd.MultiIndex.from_arrays([a.rank[sel].astype(np.int64), op_step[sel]])
    inside = op_step[sel] > 0
    counts = pd.Series(np.ones(int(inside.sum()), np.int64), index=key[inside]).groupby(level=[0, 1]).sum()
    nbytes = pd.Series(a.nbytes[sel][inside], index=key[inside]).groupby(level=[0, 1]).sum()
    idx = pd.MultiIndex.from_arrays([out["rank"].to_numpy(np.int64), out["step"].to_numpy(np.int64)])
    out["ops"] = counts.reindex(idx).fillna(0).to_numpy(dtype=np.int64)
    out["bytes"] = nbytes.reindex(idx).fillna(0).to_numpy(dtype=np.int64)
    return out[PER_RANK_COLUMNS].reset_index(drop=True)


def across_ranks(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per step over the ranks that took it: step time of the slowest rank (a
    synchronous step lasts as long as its slowest rank), mean compute,
    communication, exposed, ops and bytes per rank."""
    if len(per_rank) == 0:
        return pd.DataFrame(columns=ACROSS_COLUMNS, index=pd.Index([], name="step"))
    g = per_rank.groupby("step", sort=True)
    out = pd.DataFrame({
        "ranks": g.size(),
        "micro_steps": g["micro_steps"].max(),
        "step_ns": g["step_ns"].max(),
        "compute_ns": g["compute_ns"].mean(),
        "comm_ns": g["comm_ns"].mean(),
        "exposed_ns": g["exposed_ns"].mean(),
        "ops": g["ops"].mean(),
        "bytes": g["bytes"].mean(),
    })
    slowest = per_rank.loc[g["step_ns"].idxmax().to_numpy(), ["step", "rank"]].set_index("step")["rank"]
    out["slowest_rank"] = slowest.reindex(out.index).to_numpy()
    out.index.name = "step"
    return out[ACROSS_COLUMNS]


def outside_steps(steps: pd.DataFrame, times: dict[int, RankTime], a: OpArrays, where: np.ndarray,
                  selected: np.ndarray | None = None) -> pd.DataFrame:
    """Ops of ranks that took steps but outside every step: before the first,
    between steps, after the last. ops and bytes summed over ranks; comm_ns the
    mean over those ranks of their communication time there."""
    rows = []
    if len(steps) == 0:
        return pd.DataFrame(columns=OUTSIDE_COLUMNS)
    sel = np.ones(len(where), dtype=bool) if selected is None else selected
    srank = steps["rank"].to_numpy()
    comm = {BEFORE: [], BETWEEN: [], AFTER: []}
    for r in np.unique(srank).tolist():
        t = times.get(int(r))
        if t is None:
            continue
        st = steps[srank == r]
        b = st["t_begin_ns"].to_numpy(np.int64)
        e = st["t_end_ns"].to_numpy(np.int64)
        total = iv.length(t.comm)
        before = int(iv.covered_before(t.comm, b[:1])[0])
        after = total - int(iv.covered_before(t.comm, e[-1:])[0])
        in_steps = int(iv.length_within(t.comm, b, e).sum())
        comm[BEFORE].append(before)
        comm[AFTER].append(after)
        comm[BETWEEN].append(total - before - after - in_steps)
    stepping = np.isin(a.rank, np.unique(srank))
    for code in (BEFORE, BETWEEN, AFTER):
        m = sel & stepping & (where == code)
        rows.append({"where": OUTSIDE_NAMES[code], "ops": int(m.sum()), "bytes": int(a.nbytes[m].sum()),
                     "comm_ns": float(np.mean(comm[code])) if comm[code] else 0.0, "ranks": len(comm[code])})
    m = sel & (where == NO_STEPS)
    if m.any():
        rows.append({"where": OUTSIDE_NAMES[NO_STEPS], "ops": int(m.sum()), "bytes": int(a.nbytes[m].sum()),
                     "comm_ns": float("nan"), "ranks": int(len(np.unique(a.rank[m])))})
    return pd.DataFrame(rows).set_index("where")[OUTSIDE_COLUMNS]
