"""Reduce: fold rank and partition partials into the report's tables.

Every figure is defined in docs/report.md: sums and counts add up, per-rank rows concatenate,
exact percentiles concatenate the kept durations, sketched ones merge their
histograms (error bound: ``sketch.ALPHA``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.rank_ranges import WORLD_STRIDE, several_worlds
from ..arrays import NA_KEY, keys_index
from ..native_ext import kernels
from ..step_table import OUTSIDE_COLUMNS, PER_RANK_COLUMNS
from ..steps import AFTER, BEFORE, BETWEEN, NO_STEPS, OUTSIDE_NAMES
from ..summary import summary_columns, summed_columns, with_collectives
from .partition_map import PartitionPartial, TOP_COLUMNS
from .rank_map import CELL_TABLE_COLUMNS, RankPartial
from .sketch import LogSketch

QS = (0.5, 0.99)
PER_RANK_ROWS_KEPT = 1_000_000   # the per (rank, step) table is kept up to this many rows


class AcrossFold:
    """The per-step table over ranks (docs/report.md, "Steps"), folded one rank at a
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

    def add(self, per_rank: dict) -> None:
        """``per_rank``: one rank's step_table columns (name -> array)."""
        if not per_rank or not len(per_rank["step"]):
            return
        col = lambda k: per_rank[k].astype(np.int64, copy=False)  # noqa: E731
        st = col("step")
        self._grow(int(st.max()) + 1)
        at = slice(int(st[0]), int(st[-1]) + 1) if bool((np.diff(st) == 1).all()) else st    # 1, 2, 3...: no gather
        a = self.a
        a["ranks"][at] += 1
        a["micro_steps"][at] = np.maximum(a["micro_steps"][at], col("micro_steps"))
        for k in self.SUMS:
            a[k][at] += col(k)
        t, r = col("step_ns"), col("rank")
        cur, cur_r = a["step_ns"][at], a["slowest_rank"][at]
        # the slowest rank; on a tie the lowest rank (docs/report.md: "slowest")
        take = (t > cur) | ((t == cur) & (r < cur_r))
        a["step_ns"][at] = np.where(take, t, cur)
        a["slowest_rank"][at] = np.where(take, r, cur_r)

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


MEDIAN_COLUMNS = ["step_ns", "compute_ns", "comm_ns", "exposed_ns", "ops"]


def rank_medians(per_rank: dict) -> tuple:
    """(rank, its steps, the median of each of MEDIAN_COLUMNS over them): a row of the
    per-rank table of a run whose (rank, step) rows are too many to keep (``per_rank``:
    one rank's step_table columns)."""
    ranks = per_rank["rank"]
    if not (ranks == ranks[0]).all():
        raise ValueError("rank_medians: the steps of one rank")
    return int(ranks[0]), len(ranks), [_median(per_rank[c]) for c in MEDIAN_COLUMNS]


class RankFold:
    """Rank partials folded as they arrive (each is dropped once folded)."""

    def __init__(self):
        self.cells: list = []
        self.values: list = []
        self.per_rank: dict = {}
        self.per_rank_rows = 0
        self.per_rank_cut = False          # more rows than PER_RANK_ROWS_KEPT: medians per rank instead
        self.rank_medians: list = []
        self.across: dict = {}              # world number -> AcrossFold of its ranks (a step is a step of a world)
        self.comm: dict = {}
        self.outside = {BEFORE: [0, 0, []], BETWEEN: [0, 0, []], AFTER: [0, 0, []], NO_STEPS: [0, 0, set()]}
        self.world_steps: dict = {}         # world number -> the most steps a rank of it took
        self.ops = 0
        self.t0 = None
        self.ops_per_rank: dict = {}
        self.op_orders: list = []
        self.issues: dict = {}              # rank -> its task's reader.TraceIssue
        self.index: dict = {}
        self.facts: list = []               # rank_banner.RankFacts per rank
        self.regions: dict = {}             # rank -> its regions.RegionFigures.acc
        self.modules: dict = {}             # rank -> its modules.ModuleFigures.acc
        self.windows: list = []             # windowing.RankWindow per rank (None: no window)
        self.layers: dict = {}              # C++ ops path -> cpp_layer.CppFile
        self.bucket_runs: dict = {}         # ops path -> bucket_keys.BucketRuns
        self.pair_runs: dict = {}           # ops path -> p2p_order.PairSeqRuns
        self.spans = 0                      # compute spans recorded (every rank, the whole run)
        self.first_step = None              # the lowest step any rank took (None: none)

    def add(self, p: RankPartial) -> None:
        self.cells.append(p.cells)
        self.values.extend(p.values)
        # what AcrossFold and rank_medians read: not the steps' begin and end times (delta-packed)
        columns = {c: p.per_rank.column(c) for c in PER_RANK_COLUMNS if c[:2] != "t_"} if len(p.per_rank) else {}
        self.across.setdefault(p.rank // WORLD_STRIDE, AcrossFold()).add(columns)
        self.per_rank_rows += len(p.per_rank)
        if self.per_rank_rows > PER_RANK_ROWS_KEPT:
            if not self.per_rank_cut:     # the per-rank table becomes medians: those of the ranks kept so far
                self.rank_medians = [rank_medians(t.unpack()) for t in self.per_rank.values() if len(t)]
            self.per_rank, self.per_rank_cut = {}, True
            if columns:
                self.rank_medians.append(rank_medians(columns))
        else:
            self.per_rank[p.rank] = p.per_rank
        self.comm.update(p.comm_ns)
        self.spans += p.spans
        if p.first_step:
            self.first_step = p.first_step if self.first_step is None else min(self.first_step, p.first_step)
        for code, (ops, nbytes, extra) in p.outside.items():
            acc = self.outside[code]
            acc[0] += ops
            acc[1] += nbytes
            acc[2].update(extra) if isinstance(acc[2], set) else acc[2].extend(extra)
        w = p.rank // WORLD_STRIDE
        self.world_steps[w] = max(self.world_steps.get(w, 0), p.total_steps)
        self.ops += p.ops
        self.ops_per_rank[p.rank] = p.ops
        self.op_orders.append(p.op_order)
        if p.t0 is not None:
            self.t0 = p.t0 if self.t0 is None else min(self.t0, p.t0)
        self.issues[p.rank] = p.issues
        self.index.update(p.index)
        self.facts.append(p.facts)
        if p.regions:
            self.regions[p.rank] = p.regions
        if p.modules:
            self.modules[p.rank] = p.modules
        self.windows.append(p.window)
        self.layers.update(p.layers)
        self.bucket_runs.update(p.bucket_runs)
        self.pair_runs.update(p.pair_runs)

    def op_order(self) -> list:
        """Op names in the order the one frame's categories have them (files in name order)."""
        out: list = []
        for _, names in sorted(self.op_orders):
            out.extend(n for n in names if n not in out)
        return out

    def cell_table(self) -> pd.DataFrame:
        """Every rank's summary cells (rank_map._cells' columns) as one table."""
        cells = [c for c in self.cells if c and len(c["ops"])]
        if not cells:
            return pd.DataFrame(columns=CELL_TABLE_COLUMNS) if self.cells else pd.DataFrame()
        cols = {}
        for k in CELL_TABLE_COLUMNS + [k for k in cells[0] if k not in CELL_TABLE_COLUMNS]:   # + extra keys
            if isinstance(cells[0][k], list):
                cols[k] = [v for c in cells for v in c[k]]
            else:
                cols[k] = np.concatenate([c[k] for c in cells])
        return pd.DataFrame(cols)                 # one constructor: no per-column inserts

    def step_tables(self):
        """(per_rank, across, outside, total_steps), or None when no rank took a step. Once: the fold's
        per-step rows and sums go into the tables (not held beside them: 1 rank x 1M ops, 28 -> 14 B/op)."""
        from ..report import StepTables
        per_rank = [t for _, t in sorted(self.per_rank.items()) if len(t)]
        if not per_rank and not self.per_rank_cut and not self.total_steps:
            return None
        across = self.across_table()
        self.across, self.per_rank = {}, {}
        # Column by column, unconsolidated (copy=False): the peak is the table and one column's
        # pieces, not every rank's unpacked rows, their concatenation and pandas' 2-D block.
        join = lambda parts: parts[0] if len(parts) == 1 else np.concatenate(parts)  # noqa: E731  one rank: no copy
        pr = pd.DataFrame({c: join([t.column(c) for t in per_rank]) for c in PER_RANK_COLUMNS},
                          copy=False) if per_rank else pd.DataFrame(columns=PER_RANK_COLUMNS)
        del per_rank
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
        return StepTables(pr, across, outside, self.total_steps)

    @property
    def total_steps(self) -> int:
        """The steps of the run: the most a rank took, summed over the worlds."""
        return sum(self.world_steps.values())

    def across_table(self) -> pd.DataFrame:
        """The per-step table; a run of several worlds has a row per step of each world, ``world``
        ("w1") saying which."""
        if not several_worlds(self.ops_per_rank):
            return (self.across.get(0) or AcrossFold()).table()
        tables = {w: f.table() for w, f in sorted(self.across.items())}
        out = pd.concat(tables.values()) if tables else AcrossFold().table()
        out.insert(0, "world", np.asarray([f"w{w}" for w, t in tables.items() for _ in range(len(t))], dtype=object))
        return out

    def medians(self) -> pd.DataFrame:
        """Per rank: its steps and the median of each figure over them (the report's per-rank table),
        when the (rank, step) rows were cut (``per_rank_cut``); else empty (the rows are kept)."""
        if not self.rank_medians:
            return pd.DataFrame()
        rows = sorted(self.rank_medians)
        out = pd.DataFrame([m for _, _, m in rows], columns=MEDIAN_COLUMNS,
                           index=pd.Index(np.array([r for r, _, _ in rows], np.int32), name="rank"))
        out.insert(0, "steps", np.array([n for _, n, _ in rows], np.int64))
        return out


def table_keys(cells: pd.DataFrame) -> dict:
    """The summary tables the report shows and their key columns (phase tables only where a run has phases)."""
    has = lambda c: c in cells and bool((cells[c] != NA_KEY).any())  # noqa: E731
    phase_keys = [c for c in ("phase", "op", "detail") if c != "detail" or has(c)]
    out = {"by_op": ["op"], "by_group": ["group", "group_desc", "op"]}
    if has("phase"):
        out["by_phase"] = phase_keys
    return out


@dataclass
class CellSummary:
    """A summary table's figures that come from the rank tasks' cells alone (every column
    but the collectives and bandwidths of the partition tasks: ``with_bandwidth``)."""
    table: pd.DataFrame | None   # None: no cell
    keys: pd.DataFrame | None    # the key columns' values per row
    by: list


def cell_summary(cells: pd.DataFrame, values: list, by: list, quantile_cache: dict | None = None) -> CellSummary:
    if not len(cells):
        return CellSummary(None, None, by)
    codes, keys = _coarsen(cells, by)
    n = len(keys)
    qv = _quantiles(codes, n, values, {} if quantile_cache is None else quantile_cache)
    ranks, rcode = np.unique(cells["rank"].to_numpy(np.int64), return_inverse=True)
    col = {c: cells[c].to_numpy(np.float64) for c in ("ops", "dur", "known", "nbytes")}
    out = summed_columns(codes, n, keys_index(keys), col["ops"], col["dur"], col["known"], col["nbytes"], QS, qv,
                         rcode, len(ranks))
    return CellSummary(out, keys, by)


def with_bandwidth(cs: CellSummary, bandwidth: list | None) -> pd.DataFrame:
    """The summary table: ``cs`` plus the partitions' collectives and bandwidths (each's keys, collectives, T, S, B,
    observed, untimed: ``summary.bandwidth_terms``)."""
    if cs.table is None:
        return pd.DataFrame(columns=cs.by + summary_columns(QS)).set_index(cs.by)
    rows = {key: i for i, key in enumerate(zip(*(cs.keys[c].tolist() for c in cs.by)))}
    bw = pd.DataFrame(0.0, index=range(len(rows)), columns=["collectives", "T", "S", "B", "observed", "untimed"])
    if bandwidth:        # pandas' groupby sum (its float sums) in arrival order, of rows by code (a key not shown: last)
        code = np.array([rows.get(tuple(key), len(rows)) for p in bandwidth for key in p[0]], np.int64)
        bw = pd.DataFrame({c: np.concatenate([p[i] for p in bandwidth]) for i, c in enumerate(bw.columns, 1)})
        bw = bw.groupby(code, sort=False).sum().reindex(range(len(rows))).fillna(0.0)
    sT, sS, sB = (bw[c].to_numpy(np.float64) for c in ("T", "S", "B"))
    return with_collectives(cs.table.copy(), bw["collectives"].to_numpy(np.int64), sT, sS, sB,
                            bw["observed"].to_numpy(), bw["untimed"].to_numpy(), QS)


def _coarsen(cells: pd.DataFrame, by: list) -> tuple[np.ndarray, pd.DataFrame]:
    """(row per cell, key strings per row), rows sorted by their key strings (tuples: no groupby)."""
    tuples = list(zip(*(cells[c].tolist() for c in by)))
    rows = {t: i for i, t in enumerate(sorted(set(tuples)))}
    keys = pd.DataFrame({c: np.asarray([t[i] for t in rows], dtype=object) for i, c in enumerate(by)})
    return np.array([rows[t] for t in tuples], np.int64), keys


def _quantiles(codes: np.ndarray, n: int, values: list, cache: dict) -> np.ndarray:
    if not any(isinstance(v, LogSketch) for v in values):
        return _exact_quantiles_per_row(codes, n, values)
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
        elif sum(len(v) for v in vals):
            out[r] = exact_quantiles(vals, QS)
        cache[key] = out[r].copy()
    return out


def _exact_quantiles_per_row(codes: np.ndarray, n: int, values: list) -> np.ndarray:
    """Each row's ``exact_quantiles`` of its cells' values, bit for bit, in one sort: a table keyed by
    iteration has tens of thousands of rows, too many for a Python loop over them (float32 values
    widen exactly, so the order statistics are the same in float64)."""
    out = np.full((n, len(QS)), np.nan)
    lengths = np.fromiter((len(v) for v in values), np.intp, len(values))
    if not lengths.sum():
        return out
    x = np.concatenate(values).astype(np.float64, copy=False)
    rows = np.repeat(np.asarray(codes, dtype=np.intp), lengths)
    order = np.lexsort((x, rows))
    x, count = x[order], np.bincount(rows, minlength=n)
    start = np.cumsum(count) - count
    has = count > 0
    last = count[has, None] - 1
    virt = last * np.asarray(QS, dtype=np.float64)
    lo = np.floor(virt).astype(np.intp)
    a, b = x[start[has, None] + lo], x[start[has, None] + np.minimum(lo + 1, last)]
    t, diff = virt - lo, b - a
    out[has] = np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)
    return out


def exact_quantiles(pieces: list, qs) -> np.ndarray:
    """``np.quantile(np.concatenate(pieces).astype(np.float64), qs)`` (method "linear"), bit for bit:
    the order statistics selected among the pieces' own values (rank_map keeps durations float32
    where that is exact), then numpy's interpolation (virtual index (n - 1) q, ``_lerp``) in float64."""
    dt = np.float32 if all(np.asarray(p).dtype == np.float32 for p in pieces) else np.float64
    pieces = [np.asarray(p, dtype=dt) for p in pieces]
    n = sum(len(p) for p in pieces)
    virt = (n - 1) * np.asarray(qs, dtype=np.float64)
    lo = np.floor(virt).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    ks = np.unique(np.concatenate((lo, hi)))
    x = order_statistics(pieces, ks)
    a, b = x[np.searchsorted(ks, lo)].astype(np.float64), x[np.searchsorted(ks, hi)].astype(np.float64)
    t, diff = virt - lo, b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def groupby_quantiles(pieces: list, qs) -> list:
    """``Series(np.concatenate(pieces)).groupby(one group).quantile(q)`` for each of ``qs`` (values without NaN),
    bit for bit: pandas' "linear" (the value at index int((n - 1) q); when (n - 1) q has a fraction f, plus
    (next - value) * f) on the order statistics, without its argsort (8 B + a copy per value: the report's
    peak at 2 ranks)."""
    n = sum(len(p) for p in pieces)
    at = [(int(q * float(n - 1)), (q * float(n - 1)) % 1) for q in qs]
    ks = np.unique([k + j for k, f in at for j in (0, int(f != 0.0))])
    x = dict(zip(ks.tolist(), order_statistics([np.asarray(p) for p in pieces], ks).astype(np.float64).tolist()))
    return [x[k] if f == 0.0 else x[k] + (x[k + 1] - x[k]) * f for k, f in at]


def order_statistics(pieces: list, ks: np.ndarray) -> np.ndarray:
    """``np.partition(np.concatenate(pieces), ks)[ks]`` (pieces of one dtype, ``ks`` ascending): the kernel's
    radix selection (no copy, 3 streaming passes), else numpy's; non-negative floats order as their bits."""
    floats, kern = pieces[0].dtype.kind == "f", kernels()
    out = np.empty(len(ks), pieces[0].dtype)
    if kern is not None and kern.order_stats([np.ascontiguousarray(p) for p in pieces], np.asarray(ks, np.int64),
                                             out, floats):
        return out
    x = np.concatenate(pieces)      # a new array: partitioned in place (as integers: 1/3 faster than floats)
    (x if floats and x.view(f"i{x.itemsize}").min() < 0 else x.view(f"i{x.itemsize}")).partition(ks)
    return x[ks]


def _median(v: np.ndarray) -> float:
    """``np.median`` of an integer column, bit for bit: the float64 mean of its middle two values (odd: one, twice)."""
    ks = np.array([len(v) // 2 - 1 + len(v) % 2, len(v) // 2])
    return float(order_statistics([np.ascontiguousarray(v, np.int64)], ks).astype(np.float64).sum() / 2)


class PartitionFold:
    """Partition partials, folded in chunk order whichever arrives first: their float sums
    (bandwidth, the spreads' means, busbw) then keep their last bits from one run to the next."""

    def __init__(self, top: int):
        self.top_n = top
        self.instances = 0
        self.tops: list = []
        self.strag: list = []
        self.arrived: list = []            # (chunk, spreads, bandwidth, busbw, split) as they come

    def add(self, p: PartitionPartial) -> None:
        self.instances += p.instances
        if len(p.top):
            self.tops.append(p.top)            # a few rows each: sorted once, at the end
        if len(p.stragglers[0]):
            self.strag.append(p.stragglers)    # integer sums: any order
        self.arrived.append((p.chunk, p.spreads, p.bandwidth, p.busbw, p.split))

    def _column(self, i: int) -> list:
        return [a[i] for a in sorted(self.arrived, key=lambda a: a[0])]

    def _pieces(self, i: int) -> dict:
        """name -> the partitions' values of column ``i`` (a dict per partition), in chunk order."""
        out: dict = {}
        for by_name in self._column(i):
            for name, v in by_name.items():
                out.setdefault(name, []).append(v)
        return out

    @property
    def spreads(self) -> dict:
        """op -> its instances' spreads, a piece per partition."""
        return self._pieces(1)

    @property
    def bandwidth(self) -> dict:
        """table -> the partitions' (keys, collectives, T, S, B, observed, untimed)."""
        return self._pieces(2)

    @property
    def splits(self) -> list:
        """phase_splits.split_instances per partition."""
        return [s for s in self._column(4) if s is not None and len(s)]

    def _top(self, parts: list) -> pd.DataFrame:
        # ties broken down to the instance ((world, group, seq): unique), so the order does not
        # depend on which partition's result came first
        t = pd.concat(parts, ignore_index=True)
        keys = list(zip((-t["spread_ns"].to_numpy(np.float64)).tolist(), t["first_start_ns"].tolist(),
                        t["first_rank"].tolist(), t["world"].astype(str).tolist(), t["group"].astype(str).tolist(),
                        t["seq"].tolist()))
        return t.iloc[sorted(range(len(t)), key=keys.__getitem__)[:self.top_n]].reset_index(drop=True)

    def skew(self, op_order: list | None = None) -> dict:
        """Arrival skew (docs/report.md): ``top``, the instances with the largest spread (last
        caller minus first); ``stragglers``: per rank, how often it arrived last and the total
        time the others waited for it; ``by_op``: spread stats (rows in ``op_order``, else by name)."""
        if not self.instances:
            empty = pd.DataFrame(columns=["last", "wait_ns", "mean_spread_ns", "share_last"])
            return {"top": pd.DataFrame(columns=TOP_COLUMNS), "stragglers": empty, "by_op": pd.DataFrame(),
                    "instances": 0}
        ranks, at = np.unique(np.concatenate([s[0] for s in self.strag]), return_inverse=True)
        sums = [np.zeros(len(ranks), np.int64) for _ in range(2)]
        for i, col in enumerate(sums, 1):
            np.add.at(col, at, np.concatenate([s[i] for s in self.strag]).astype(np.int64))
        strag = pd.DataFrame({"last": sums[0], "wait_ns": sums[1]},     # ranks are int32 in the frame
                             index=pd.Index(ranks.astype(np.int32), name="rank"))
        strag["mean_spread_ns"] = strag["wait_ns"] / strag["last"]
        strag["share_last"] = strag["last"] / self.instances
        strag = strag.sort_values("wait_ns", ascending=False, kind="stable")
        rows = {}
        for op, pieces in sorted(self.spreads.items()):
            v = np.concatenate(pieces)
            p50, p99 = groupby_quantiles(pieces, (0.5, 0.99))
            rows[op] = {"collectives": len(v), "mean_ns": float(v.mean()), "p50_ns": p50, "p99_ns": p99,
                        "max_ns": int(v.max())}
            del v
        by_op = pd.DataFrame.from_dict(rows, orient="index")
        if op_order:
            by_op = by_op.loc[[o for o in op_order if o in rows] + [o for o in sorted(rows) if o not in op_order]]
        by_op.index.name = "op"
        return {"top": self._top(self.tops) if self.tops else pd.DataFrame(columns=TOP_COLUMNS),
                "stragglers": strag.head(self.top_n), "by_op": by_op, "instances": self.instances}

    def run_busbw(self) -> float:
        busbw = self._column(3)
        b, t = sum(x[0] for x in busbw), sum(x[1] for x in busbw)
        return b / (t * 1e-9) if t > 0 else float("nan")
