"""Reduce: fold rank and partition partials into the report's tables.

Every figure is the one ``analysis.report.build_report`` computes (same
definitions, docs/report.md): sums and counts add up, per-rank rows concatenate,
exact percentiles concatenate the kept durations, sketched ones merge their
histograms (error bound: ``sketch.ALPHA``)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..arrays import NA_KEY, keys_index
from ..step_table import OUTSIDE_COLUMNS, PER_RANK_COLUMNS
from ..steps import AFTER, BEFORE, BETWEEN, NO_STEPS, OUTSIDE_NAMES
from ..summary import SUMMARY_COLUMNS, qname, rank_spread
from .partition_map import PartitionPartial, TOP_COLUMNS
from .rank_map import RankPartial
from .sketch import LogSketch

QS = (0.5, 0.99)
PER_RANK_ROWS_KEPT = 1_000_000   # the per (rank, step) table is kept up to this many rows


class AcrossFold:
    """The per-step table over ranks (step_table.across_ranks), folded one rank at a
    time into arrays indexed by step number: a run's steps x ranks rows never coexist."""

    SUMS = ("compute_ns", "comm_ns", "exposed_ns", "ops", "bytes")

    def __init__(self):
        self.n = 0
        self.a = {k: np.zeros(0, np.int64) for k in ("ranks", "micro_steps", "step_ns", "slowest_rank", *self.SUMS)}

    def _grow(self, n: int) -> None:
        if n <= self.n:
            return
        for k, v in self.a.items():
            fill = -1 if k in ("step_ns", "slowest_rank") else 0
            self.a[k] = np.concatenate((v, np.full(n - self.n, fill, np.int64)))
        self.n = n

    def add(self, per_rank: pd.DataFrame) -> None:
        if not len(per_rank):
            return
        st = per_rank["step"].to_numpy(np.int64)
        self._grow(int(st.max()) + 1)
        a = self.a
        a["ranks"][st] += 1
        a["micro_steps"][st] = np.maximum(a["micro_steps"][st], per_rank["micro_steps"].to_numpy(np.int64))
        for k in self.SUMS:
            a[k][st] += per_rank[k].to_numpy(np.int64)
        t, r = per_rank["step_ns"].to_numpy(np.int64), per_rank["rank"].to_numpy(np.int64)
        cur, cur_r = a["step_ns"][st], a["slowest_rank"][st]
        # the slowest rank; on a tie the lowest rank (across_ranks' idxmax over rows sorted by rank)
        take = (t > cur) | ((t == cur) & (r < cur_r))
        a["step_ns"][st] = np.where(take, t, cur)
        a["slowest_rank"][st] = np.where(take, r, cur_r)

    def table(self) -> pd.DataFrame:
        from ..step_table import ACROSS_COLUMNS
        a = self.a
        has = np.flatnonzero(a["ranks"] > 0)
        n = a["ranks"][has]
        out = pd.DataFrame({"ranks": n, "micro_steps": a["micro_steps"][has].astype(np.int32),
                            "step_ns": a["step_ns"][has]}, index=pd.Index(has.astype(np.int32), name="step"))
        for k in self.SUMS:
            out[k] = a[k][has] / n
        out["slowest_rank"] = a["slowest_rank"][has].astype(np.int32)
        return out[ACROSS_COLUMNS]


class RankFold:
    """Rank partials folded as they arrive (each is dropped once folded)."""

    def __init__(self):
        self.cells: list = []
        self.values: list = []
        self.per_rank: dict = {}
        self.per_rank_rows = 0
        self.per_rank_cut = False          # more rows than PER_RANK_ROWS_KEPT: medians per rank instead
        self.rank_medians: list = []
        self.across = AcrossFold()
        self.comm: dict = {}
        self.outside = {BEFORE: [0, 0, []], BETWEEN: [0, 0, []], AFTER: [0, 0, []], NO_STEPS: [0, 0, set()]}
        self.total_steps = 0
        self.ops = 0
        self.t0 = None
        self.ops_per_rank: dict = {}
        self.op_orders: list = []
        self.issues: list = []
        self.index: dict = {}
        self.facts: list = []               # banner_map.RankFacts per rank
        self.regions: dict = {}             # rank -> its regions.RegionFigures.acc
        self.windows: list = []             # window_map.RankWindow per rank (None: no window)
        self.layers: dict = {}              # C++ ops path -> layers_map.CppFile

    def add(self, p: RankPartial) -> None:
        self.cells.append(p.cells)
        self.values.extend(p.values)
        self.across.add(p.per_rank)
        if p.medians is not None and len(p.medians):
            self.rank_medians.append(p.medians)
        self.per_rank_rows += len(p.per_rank)
        if self.per_rank_rows > PER_RANK_ROWS_KEPT:
            self.per_rank, self.per_rank_cut = {}, True
        else:
            self.per_rank[p.rank] = p.per_rank
        self.comm.update(p.comm_ns)
        for code, (ops, nbytes, extra) in p.outside.items():
            acc = self.outside[code]
            acc[0] += ops
            acc[1] += nbytes
            acc[2].update(extra) if isinstance(acc[2], set) else acc[2].extend(extra)
        self.total_steps = max(self.total_steps, p.total_steps)
        self.ops += p.ops
        self.ops_per_rank[p.rank] = p.ops
        self.op_orders.append(p.op_order)
        if p.t0 is not None:
            self.t0 = p.t0 if self.t0 is None else min(self.t0, p.t0)
        self.issues.extend(i for i in p.issues if i not in self.issues)
        self.index.update(p.index)
        self.facts.append(p.facts)
        if p.regions:
            self.regions[p.rank] = p.regions
        self.windows.append(p.window)
        self.layers.update(p.layers)

    def op_order(self) -> list:
        """Op names in the order the one frame's categories have them (files in name order)."""
        out: list = []
        for _, names in sorted(self.op_orders):
            out.extend(n for n in names if n not in out)
        return out

    def cell_table(self) -> pd.DataFrame:
        cells = [c for c in self.cells if len(c)]
        return pd.concat(cells, ignore_index=True) if cells else self.cells[0] if self.cells else pd.DataFrame()

    def step_tables(self):
        """(per_rank, across, outside, total_steps), or None when no rank took a step."""
        from ..report import StepTables
        per_rank = [t for _, t in sorted(self.per_rank.items()) if len(t)]
        if not per_rank and not self.per_rank_cut and not self.total_steps:
            return None
        pr = pd.concat(per_rank, ignore_index=True)[PER_RANK_COLUMNS] if per_rank else \
            pd.DataFrame(columns=PER_RANK_COLUMNS)
        rows = []
        for code in (BEFORE, BETWEEN, AFTER):
            ops, nbytes, comm = self.outside[code]
            rows.append({"where": OUTSIDE_NAMES[code], "ops": ops, "bytes": nbytes,
                         "comm_ns": float(np.mean(comm)) if comm else 0.0, "ranks": len(comm)})
        ops, nbytes, ranks = self.outside[NO_STEPS]
        if ops:
            rows.append({"where": OUTSIDE_NAMES[NO_STEPS], "ops": ops, "bytes": nbytes, "comm_ns": float("nan"),
                         "ranks": len(ranks)})
        outside = pd.DataFrame(rows).set_index("where")[OUTSIDE_COLUMNS]
        return StepTables(pr, self.across.table(), outside, self.total_steps)

    def medians(self) -> pd.DataFrame:
        """Per rank: its steps and the median of each figure over them (the report's per-rank table)."""
        return pd.concat(self.rank_medians).sort_index() if self.rank_medians else pd.DataFrame()


def table_keys(cells: pd.DataFrame) -> dict:
    """The summary tables the report shows and their key columns (as build_report picks them)."""
    has = lambda c: c in cells and bool((cells[c] != NA_KEY).any())  # noqa: E731
    phase_keys = [c for c in ("phase", "op", "detail") if c != "detail" or has(c)]
    out = {"by_op": ["op"], "by_group": ["group", "group_desc", "op"]}
    if has("phase"):
        out["by_phase"] = phase_keys
    return out


def summary_table(cells: pd.DataFrame, values: list, by: list, bandwidth: pd.DataFrame | None,
                  quantile_cache: dict | None = None) -> pd.DataFrame:
    """analysis.summary.op_summary from cells (one row per key of ``by``). ``quantile_cache``:
    percentiles by the set of cells of a row, shared by the tables of one run (per op and
    per phase+op rows often hold the same cells)."""
    cols = SUMMARY_COLUMNS[:5] + [qname(q) for q in QS] + SUMMARY_COLUMNS[7:]
    if not len(cells):
        return pd.DataFrame(columns=by + cols).set_index(by)
    codes, keys = _coarsen(cells, by)
    n = len(keys)
    total = np.bincount(codes, weights=cells["dur"].to_numpy(np.float64), minlength=n)
    nknown = np.bincount(codes, weights=cells["known"].to_numpy(np.float64), minlength=n)
    out = pd.DataFrame(index=keys_index(keys))
    out["ops"] = np.bincount(codes, weights=cells["ops"].to_numpy(np.float64), minlength=n).astype(np.int64)
    out["bytes"] = np.bincount(codes, weights=cells["bytes"].to_numpy(np.float64), minlength=n).astype(np.int64)
    out["total_ns"] = total
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mean_ns"] = np.where(nknown > 0, total / nknown, np.nan)
    qv = _quantiles(codes, n, values, {} if quantile_cache is None else quantile_cache)
    for j, q in enumerate(QS):
        out[qname(q)] = qv[:, j]
    grand = cells["dur"].to_numpy(np.float64).sum()
    out["share"] = total / grand if grand > 0 else np.nan
    ranks, rcode = np.unique(cells["rank"].to_numpy(np.int64), return_inverse=True)
    out["cv"], out["ranks"] = rank_spread(codes, rcode, n, len(ranks), cells["dur"].to_numpy(np.float64),
                                          cells["ops"].to_numpy(np.float64))
    bw = _bandwidth_rows(bandwidth, keys, by)
    out["collectives"] = bw["collectives"].to_numpy(np.int64)
    sT, sS, sB = (bw[c].to_numpy(np.float64) for c in ("T", "S", "B"))
    with np.errstate(divide="ignore", invalid="ignore"):
        out["algbw"] = np.where(sT > 0, sS / (sT * 1e-9), np.nan)
        out["busbw"] = np.where(sT > 0, sB / (sT * 1e-9), np.nan)
    return out[cols].sort_values("total_ns", ascending=False, kind="stable")


def _coarsen(cells: pd.DataFrame, by: list) -> tuple[np.ndarray, pd.DataFrame]:
    """(row per cell, key strings per row), rows sorted by their key strings (as Cells.coarsen)."""
    g = cells.groupby(by, sort=True)
    codes = g.ngroup().to_numpy(np.int64)
    heads = cells.iloc[g.head(1).index].copy()
    heads["_code"] = codes[g.head(1).index]
    heads = heads.sort_values("_code")
    keys = pd.DataFrame({c: np.asarray(heads[c].tolist(), dtype=object) for c in by})
    return codes, keys


def _quantiles(codes: np.ndarray, n: int, values: list, cache: dict) -> np.ndarray:
    out = np.full((n, len(QS)), np.nan)
    members: list = [[] for _ in range(n)]
    for i, c in enumerate(codes):
        members[c].append(i)
    for r, cells in enumerate(members):
        key = tuple(cells)
        if key in cache:
            out[r] = cache[key]
            continue
        vals = [values[i] for i in cells]
        if not vals:
            continue
        if isinstance(vals[0], LogSketch):
            sk = vals[0]
            for v in vals[1:]:
                sk = sk.merge(v)
            if sk.n:
                out[r] = [sk.quantile(q) for q in QS]
        else:
            seg = np.concatenate([np.asarray(v, dtype=np.float64) for v in vals])
            if len(seg):
                out[r] = np.quantile(seg, QS)
        cache[key] = out[r].copy()
    return out


def _bandwidth_rows(bandwidth: pd.DataFrame | None, keys: pd.DataFrame, by: list) -> pd.DataFrame:
    cols = ["collectives", "T", "S", "B"]
    if bandwidth is None or not len(bandwidth):
        return pd.DataFrame(0.0, index=range(len(keys)), columns=cols)
    summed = bandwidth.groupby(by, sort=False)[cols].sum()
    idx = pd.MultiIndex.from_frame(keys) if len(by) > 1 else pd.Index(keys[by[0]])
    return summed.reindex(idx).fillna(0.0).reset_index(drop=True)


class PartitionFold:
    """Partition partials folded as they arrive."""

    def __init__(self, top: int):
        self.top_n = top
        self.instances = 0
        self.tops: list = []
        self.strag: list = []
        self.spreads: dict = {}
        self.bandwidth: dict = {}
        self.busbw = [0.0, 0.0, 0]
        self.splits: list = []             # split_map.split_instances per partition

    def add(self, p: PartitionPartial) -> None:
        self.instances += p.instances
        if len(p.top):
            self.tops = [self._top(self.tops + [p.top])]
        if len(p.stragglers):
            self.strag.append(p.stragglers)
        for op, v in p.spreads.items():
            self.spreads.setdefault(op, []).append(v)
        for name, t in p.bandwidth.items():
            self.bandwidth.setdefault(name, []).append(t)
        for i in range(3):
            self.busbw[i] += p.busbw[i]
        if p.split is not None and len(p.split):
            self.splits.append(p.split)

    def _top(self, parts: list) -> pd.DataFrame:
        t = pd.concat(parts, ignore_index=True)
        order = np.lexsort((t["first_rank"].to_numpy(), t["first_start_ns"].to_numpy(),
                            -t["spread_ns"].to_numpy(np.float64)))
        return t.iloc[order[:self.top_n]].reset_index(drop=True)

    def bandwidth_table(self, name: str) -> pd.DataFrame | None:
        parts = self.bandwidth.get(name)
        return pd.concat(parts, ignore_index=True) if parts else None

    def skew(self, op_order: list | None = None) -> dict:
        """As analysis.skew.skew_summary (by_op rows in ``op_order``, else by name)."""
        if not self.instances:
            empty = pd.DataFrame(columns=["last", "wait_ns", "mean_spread_ns", "share_last"])
            return {"top": pd.DataFrame(columns=TOP_COLUMNS), "stragglers": empty, "by_op": pd.DataFrame(),
                    "instances": 0}
        s = pd.concat(self.strag).groupby(level=0, sort=True).sum()
        strag = pd.DataFrame({"last": s["last"].astype(np.int64), "wait_ns": s["wait_ns"].astype(np.int64)})
        strag["mean_spread_ns"] = strag["wait_ns"] / strag["last"]
        strag["share_last"] = strag["last"] / self.instances
        strag.index = strag.index.astype(np.int32)   # ranks are int32 in the frame
        strag.index.name = "rank"
        strag = strag.sort_values("wait_ns", ascending=False, kind="stable")
        rows = {}
        for op in sorted(self.spreads):
            v = np.concatenate(self.spreads[op])
            rows[op] = {"collectives": len(v), "mean_ns": float(v.mean()), "p50_ns": float(np.quantile(v, 0.5)),
                        "p99_ns": float(np.quantile(v, 0.99)), "max_ns": int(v.max())}
        by_op = pd.DataFrame.from_dict(rows, orient="index")
        if op_order:
            by_op = by_op.loc[[o for o in op_order if o in rows] + [o for o in sorted(rows) if o not in op_order]]
        by_op.index.name = "op"
        return {"top": self.tops[0] if self.tops else pd.DataFrame(columns=TOP_COLUMNS),
                "stragglers": strag.head(self.top_n), "by_op": by_op, "instances": self.instances}

    def run_busbw(self) -> float:
        b, t, _ = self.busbw
        return b / (t * 1e-9) if t > 0 else float("nan")
