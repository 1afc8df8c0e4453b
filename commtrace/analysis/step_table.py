"""Per step and rank: step time, compute, communication, exposed communication (pure).

Definitions: docs/report.md, "Time". Communication: the union of a rank's ops inside the window;
compute: its compute spans minus its waits (each op from call to return; to its end where the caller
waits in place: blocking ops, DDP's and Join's own; in a backward pass with DDP gradient buckets,
from the last bucket's launch to the pass's end, where DDP's reducer waits, but for an optimizer step
run inside it, ZeRO's overlap_with_ddp, up to its last launch); exposed: communication
not covered by compute. So exposed <= comm <= window and compute + exposed <= window.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace import schema
from . import intervals as iv
from .arrays import OpArrays, op_times, rows_by_rank, rows_of, take_rows
from .native_ext import kernels
from .steps import AFTER, BEFORE, BETWEEN

PER_RANK_COLUMNS = ["rank", "step", "t_begin_ns", "t_end_ns", "micro_steps", "step_ns", "compute_ns",
                    "comm_ns", "exposed_ns", "ops", "bytes"]
ACROSS_COLUMNS = ["ranks", "micro_steps", "step_ns", "compute_ns", "comm_ns", "exposed_ns", "ops", "bytes",
                  "slowest_rank"]
OUTSIDE_COLUMNS = ["ops", "bytes", "comm_ns", "ranks"]


@dataclass
class RankTime:
    comm: iv.IntervalSet      # union of the rank's selected ops, inside its window
    compute: iv.IntervalSet   # compute spans minus waits (all the rank's ops)
    exposed: iv.IntervalSet   # comm minus compute
    rows: np.ndarray | None = None   # a time piece's (RankTimes.pieces): the ops overlapping it (None: the rank's)
    cut: tuple | None = None         # its [lo, hi): every set above lies inside it (None: the whole time line)
    first: bool = True               # the rank's first piece (counts what is per op or per rank, not per time)


def _is_value(col: pd.Series, value: str) -> np.ndarray:
    """Rows of a (categorical) column equal to ``value``, without materializing strings."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.cat.categories
        return col.cat.codes.to_numpy() == cats.get_loc(value) if value in cats else np.zeros(len(col), bool)
    return (col == value).to_numpy(dtype=bool, na_value=False)


@dataclass
class WaitColumns:
    """Per op, what says how long its caller waited: return time (``ret_unknown``: none), waits in place
    (``in_place``: blocking, or DDP's/Join's own op), DDP gradient bucket; ``of(rows)``: one rank's waits.
    ``offsets``: the records' (d_return, d_end), the return times op_times gives for the rows read (``ret`` None)."""
    a: OpArrays
    ret: np.ndarray | None
    ret_unknown: np.ndarray | None
    in_place: np.ndarray | None     # one flag (not blocking and detail apart: 1 B/op less held by the rank task)
    grad: np.ndarray
    offsets: tuple | None = None

    @classmethod
    def of_frame(cls, frame: pd.DataFrame, a: OpArrays) -> "WaitColumns":
        ret = frame["t_return_ns"].array if "t_return_ns" in frame else None
        ret = ret if isinstance(ret, pd.arrays.IntegerArray) else None
        in_place = ~frame["async"].to_numpy(dtype=bool) if "async" in frame else None
        if "detail" in frame and isinstance(frame["detail"].dtype, pd.CategoricalDtype):
            codes = frame["detail"].cat.codes.to_numpy()
            waits = np.array([schema.detail_waits_in_place(c) for c in frame["detail"].cat.categories] + [False])
            detail = waits[codes]   # code -1 (no detail) reads the last entry: False
            in_place = detail if in_place is None else in_place | detail
        return cls(a, None if ret is None else ret._data, None if ret is None else ret._mask, in_place,
                   gradient_buckets(frame))

    def of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) of each op's wait: to its return, or to its end where the caller waits in place."""
        start, end = take_rows(self.a.start, rows), take_rows(self.a.end, rows)
        if self.offsets is not None:        # start where unknown
            ret = op_times(take_rows(self.offsets[0], rows), take_rows(self.offsets[1], rows), start)[0]
        else:
            ret = start if self.ret is None else \
                np.where(take_rows(self.ret_unknown, rows), start, take_rows(self.ret, rows))
        ret = np.clip(ret, start, end, out=None if ret is start else ret)     # int64 (both columns are): in place
        return start, ret if self.in_place is None else np.where(take_rows(self.in_place, rows), end, ret)


def gradient_buckets(frame: pd.DataFrame) -> np.ndarray:
    """Per op: a DDP gradient bucket launched in a backward pass (``bucket`` set, phase backward)."""
    if "bucket" not in frame or "phase" not in frame:
        return np.zeros(len(frame), dtype=bool)
    return frame["bucket"].notna().to_numpy() & _is_value(frame["phase"], "backward")


def _ddp_gradient_tails(starts: np.ndarray, grad: np.ndarray, bw_begin: np.ndarray, bw_end: np.ndarray,
                        chunk: int) -> iv.IntervalSet:
    """[last gradient bucket launch, end of the pass] per backward pass of one rank that launched
    DDP gradient buckets (the ops of ``starts`` where ``grad``), read ``chunk`` ops at a time (0: at once)."""
    if not len(bw_begin) or not grad.any():
        return iv.empty()
    b, e = bw_begin, bw_end
    if not (b[1:] >= b[:-1]).all():       # spans are written in time order: no gathered copies (the task's peak)
        order = np.argsort(b, kind="stable")
        b, e = b[order], e[order]
    last, chunk = np.full(len(b), np.iinfo(np.int64).min), max((chunk or len(starts)) // 8, 1)
    for i in range(0, len(starts), chunk):      # the latest launch of each pass, an eighth of a chunk at a time (a
        t = starts[i:i + chunk][grad[i:i + chunk]]      # max over the passes its launches fall in: small buffers)
        if len(t):
            lo, hi = max(np.searchsorted(b, t.min(), "right") - 1, 0), np.searchsorted(b, t.max(), "right")
            np.maximum(last[lo:hi], _last_in_window(b[lo:hi], e[lo:hi], t), out=last[lo:hi])
    has = last > np.iinfo(np.int64).min
    if has.all() and (e > last).all() and (last[1:] > e[:-1]).all():   # sorted, apart: the set itself (bw_end
        return last, e                                                  # is the caller's copy; no union buffers)
    return iv.union(last, e) if has.all() else iv.union(last[has], e[has])


def _step_in_tails(tails: iv.IntervalSet, starts: np.ndarray, ob: np.ndarray, oe: np.ndarray) -> iv.IntervalSet:
    """``tails`` less the optimizer steps run inside them (ZeroRedundancyOptimizer(overlap_with_ddp=True)
    steps in DDP's comm hook: compute), but for each such step's wait from its last op launch (the last
    parameter broadcast) to its end. Optimizer spans outside every tail change nothing."""
    if not _overlaps(tails, ob, oe):
        return tails            # (found without the sets below: their buffers were the rank task's peak)
    inner = iv.intersect(iv.union(ob, oe), tails)
    order = np.argsort(ob, kind="stable")
    b, e = ob[order], oe[order]
    last = _last_in_window(b, e, starts)
    has = last > np.iinfo(np.int64).min
    waits = iv.intersect(iv.union(last[has], e[has]), tails)
    return iv.union_of(iv.subtract(tails, inner), waits)


def _overlaps(tails: iv.IntervalSet, ob: np.ndarray, oe: np.ndarray) -> bool:
    """Whether a nonempty span [ob[i], oe[i]) overlaps a tail (one search: the first tail ending after its begin)."""
    if not len(tails[0]) or not len(ob):
        return False
    j = np.minimum(np.searchsorted(tails[1], ob, side="right"), len(tails[0]) - 1)
    return bool(((tails[1][j] > ob) & (tails[0][j] < oe) & (oe > ob)).any())


def _last_in_window(b: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per window [b[i], e[i]] (``b`` sorted): the latest ``t`` in it, each time counting for the last
    window beginning at or before it (int64 min: none)."""
    last = np.full(len(b), np.iinfo(np.int64).min)
    kern = kernels()
    if kern is not None:
        kern.last_in_window(b, e, np.ascontiguousarray(t, dtype=np.int64), last)
        return last
    k = np.searchsorted(b, t, side="right") - 1
    ok = (k >= 0) & (t <= e[np.maximum(k, 0)])
    np.maximum.at(last, k[ok], t[ok])
    return last


def in_pieces(ops: int, size: int) -> bool:
    """RankTimes.pieces walks a rank of ``ops`` ops in pieces of ``size``: not when ``size`` is 0 or over half
    its ops (two pieces save no memory, measured)."""
    return 0 < size and 2 * size < ops


def _span_rows(spans: pd.DataFrame) -> dict:
    """rank -> its rows of ``spans`` (one rank's: a range, no row index)."""
    rank = spans["rank"].to_numpy()
    return {int(rank[0]): range(len(rank))} if rank.min() == rank.max() else rows_by_rank(rank)


def busy_times(spans: pd.DataFrame | None, chunk: int = 0) -> dict:
    """rank -> the union of its compute spans, ``chunk`` spans at a time (no buffers of every span's size)."""
    if spans is None or not len(spans):
        return {}
    sb, se = spans["t_begin_ns"].to_numpy(np.int64), spans["t_end_ns"].to_numpy(np.int64)
    out = {}
    for r, rows in _span_rows(spans).items():
        out[r], k = iv.empty(), chunk or len(rows) or 1
        for i in range(0, len(rows), k):
            part = rows[i:i + k]
            out[r] = iv.union_of(out[r], iv.union(take_rows(sb, part), take_rows(se, part)))
    return out


class RankTimes:
    """Each rank's RankTime, built one rank at a time (all ranks' sets never coexist in memory).
    ``frame``: the ops (rows as ``a``) or their WaitColumns; ``selected``: the ops in the window
    (default all); ``windows``: rank -> (lo, hi) clipping the communication set; ``chunk``: ops a pass over
    the whole rank reads at a time (0: all). Compute always accounts for every op."""

    def __init__(self, frame: "pd.DataFrame | WaitColumns", a: OpArrays, spans: pd.DataFrame | None,
                 selected: np.ndarray | None = None, windows: dict | None = None, chunk: int = 0,
                 busy: dict | None = None):
        self.a, self.selected, self.windows, self.chunk = a, selected, windows, chunk
        self.by_rank = a.rank_rows()
        self.cols = None
        if len(a.start):
            self.cols = frame if isinstance(frame, WaitColumns) else WaitColumns.of_frame(frame, a)
        self.tails: dict = {}       # rank -> the waits its spans alone give: built here, before the caller's
        if spans is not None and len(spans):    # per-op columns (the rank task's peak was these temporaries)
            sb, se = spans["t_begin_ns"].to_numpy(np.int64), spans["t_end_ns"].to_numpy(np.int64)
            is_bw, is_opt = _is_value(spans["phase"], "backward"), _is_value(spans["phase"], "optimizer")
            for r, sp in _span_rows(spans).items():
                bw, opt = (is_bw, is_opt) if isinstance(sp, range) else (sp[take_rows(is_bw, sp)],
                                                                         sp[take_rows(is_opt, sp)])
                self.tails[r] = self._tails(r, bw, opt, sb, se)
            del is_bw, is_opt, bw, opt      # not beside the busy times' buffers
        # rank -> the union of its compute spans (busy_times; the rank task builds it before its ops are gathered)
        self.busy: dict = busy_times(spans, chunk) if busy is None else busy

    def ranks(self) -> list[int]:
        return sorted(set(self.by_rank) | set(self.busy))

    def of(self, r: int) -> RankTime:
        return next(self.pieces(r, 0))

    def pieces(self, r: int, size: int):
        """Rank ``r``'s RankTime in time pieces of about ``size`` ops, each set cut to its piece: a length is the
        sum of its pieces', and no piece holds the rank's whole sets and their temporaries (the rank task's peak).
        One piece unless ``in_pieces``."""
        rows, busy, tails = self.by_rank.get(r, np.empty(0, dtype=np.int64)), self.busy.get(r), self.tails.get(r)
        if not in_pieces(len(rows), size):
            yield self._time(r, rows, busy, tails)
            return
        start, end = take_rows(self.a.start, rows), take_rows(self.a.end, rows)
        edges, c = [iv.NEG, *np.unique(start[size::size]).tolist(), iv.POS], self.chunk or len(rows)
        # each chunk's earliest start and latest end: a piece looks only in the chunks that can hold its ops
        # (every chunk for every piece was pieces x chunks passes in Python)
        firsts = np.arange(0, len(rows), c)
        chunk_lo, chunk_hi = np.minimum.reduceat(start, firsts), np.maximum.reduceat(end, firsts)
        for k, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
            part = np.concatenate([np.empty(0, np.intp)] + [   # an op's wait lies within [start, end]
                np.flatnonzero((start[i:i + c] < hi) & (end[i:i + c] > lo)) + i   # (no whole-rank masks)
                for i in firsts[(chunk_lo < hi) & (chunk_hi > lo)].tolist()])
            dense = len(part) and part[-1] - part[0] < len(part) + len(part) // 4   # then their range (views;
            part = rows[part[0]:part[-1] + 1] if dense else rows_of(rows, part)     # the others' clip to nothing)
            mine = None if busy is None else iv.clip(busy, lo, hi)
            yield self._time(r, part, mine, None if tails is None else iv.clip(tails, lo, hi), (lo, hi), k == 0)

    def _tails(self, r: int, bw: np.ndarray, opt: np.ndarray, sb: np.ndarray, se: np.ndarray) -> iv.IntervalSet:
        """Rank ``r``'s DDP gradient tails less the optimizer steps run inside them (``bw``, ``opt``: its
        backward and optimizer spans, rows or a mask of ``sb`` / ``se``)."""
        rows = self.by_rank.get(r, np.empty(0, dtype=np.int64))
        grad = take_rows(self.cols.grad, rows) if self.cols is not None else np.zeros(len(rows), dtype=bool)
        starts = take_rows(self.a.start, rows)
        tails = _ddp_gradient_tails(starts, grad, sb[bw], se[bw], self.chunk)
        k = self.chunk or len(opt) or 1     # an optimizer span overlapping a tail, a chunk of them at a time: the
        part = (lambda x, i: x[i:i + k][opt[i:i + k]]) if opt.dtype == bool else (lambda x, i: x[opt[i:i + k]])
        if not any(_overlaps(tails, part(sb, i), part(se, i)) for i in range(0, len(opt), k)):   # spans' copies
            return tails            # and the search's temporaries were the rank task's peak; found: ZeRO's case
        return _step_in_tails(tails, starts, sb[opt], se[opt])

    def _time(self, r: int, rows: np.ndarray, busy, tails, cut: tuple | None = None, first: bool = True) -> RankTime:
        mine = rows if self.selected is None else rows_of(rows, take_rows(self.selected, rows))
        comm = iv.union(take_rows(self.a.start, mine), take_rows(self.a.end, mine))
        for lo, hi in ([cut] if cut else []) + ([self.windows.get(r, (0, 0))] if self.windows is not None else []):
            comm = iv.clip(comm, lo, hi)
        compute = iv.empty() if busy is None else self._compute(rows, busy, tails)    # its temporaries gone: the peak
        compute = iv.clip(compute, *cut) if cut else compute
        return RankTime(comm, compute, iv.subtract(comm, compute), None if cut is None else rows, cut, first)

    def _compute(self, rows: np.ndarray, busy: iv.IntervalSet, tails: iv.IntervalSet) -> iv.IntervalSet:
        return iv.subtract(busy, iv.union_of(self.cols.of(rows) if self.cols is not None else iv.empty(), tails))


class StepFigures:
    """The per (rank, step) table from the ops and bytes per step (ops_per_step): ``add`` each rank's RankTime,
    then ``columns()``."""

    def __init__(self, steps: pd.DataFrame, ops: np.ndarray, nbytes: np.ndarray):
        self.steps = steps
        n = len(steps)
        self.lo = steps["t_begin_ns"].to_numpy(np.int64)
        self.hi = steps["t_end_ns"].to_numpy(np.int64)
        self.rows = rows_by_rank(steps["rank"].to_numpy()) if n else {}
        self.compute, self.comm, self.exposed = (np.zeros(n, np.int64) for _ in range(3))
        self.ops, self.nbytes = ops, nbytes

    def add(self, r: int, t: RankTime) -> None:
        rows = self.rows.get(r)
        if rows is None:
            return
        rows = _overlapping(rows, self.lo, self.hi, t.cut)
        lo, hi = self.lo[rows], self.hi[rows]
        self.compute[rows] += iv.length_within(t.compute, lo, hi)
        self.comm[rows] += iv.length_within(t.comm, lo, hi)
        self.exposed[rows] += iv.length_within(t.exposed, lo, hi)

    def columns(self) -> dict:
        """The table's columns (PER_RANK_COLUMNS) as arrays; none when there is no step."""
        if len(self.steps) == 0:
            return {}
        st = self.steps
        return {"rank": st["rank"].to_numpy(), "step": st["step"].to_numpy(), "t_begin_ns": self.lo,
                "t_end_ns": self.hi, "micro_steps": st["micro_steps"].to_numpy(), "step_ns": self.hi - self.lo,
                "compute_ns": self.compute, "comm_ns": self.comm, "exposed_ns": self.exposed,
                "ops": self.ops, "bytes": self.nbytes}


def ops_per_step(steps: pd.DataFrame, a: OpArrays, op_step: np.ndarray, selected: np.ndarray | None, chunk: int):
    """(ops, bytes) per row of ``steps``: the rank's selected ops starting in the step (per rank a
    table step number -> row, -1: not shown), added ``chunk`` ops at a time (0: all; in row order either way,
    and integer sums below 2**53 are exact in any order)."""
    n = len(steps)
    ops, nbytes = np.zeros(n, np.int64), np.zeros(n, np.float64)
    if n == 0 or not len(op_step):
        return ops, nbytes.astype(np.int64)
    snum = steps["step"].to_numpy()         # as held (int32): no int64 copy
    by_rank = a.rank_rows()
    for r, rows in rows_by_rank(steps["rank"].to_numpy()).items():
        mine = by_rank.get(r)
        if mine is None:
            continue
        if selected is not None:
            mine = rows_of(mine, take_rows(selected, mine))
        st = op_step if len(mine) == len(op_step) else op_step[mine]    # one rank's frame: no gather
        table = np.full(int(max(st.max(initial=0), snum[rows].max())) + 1, -1, dtype=np.int64)
        table[snum[rows]] = rows
        w, k = a.nbytes if len(mine) == len(a.nbytes) else a.nbytes[mine], chunk or len(st) or 1
        for i in range(0, len(st), k):
            _add_by_row(table, st[i:i + k], w[i:i + k], ops, nbytes)
    return ops, nbytes.astype(np.int64)


def _add_by_row(row_of: np.ndarray, st: np.ndarray, weights: np.ndarray, counts: np.ndarray,
                sums: np.ndarray) -> None:
    """counts[r] += 1, sums[r] += weights[i] for each op i with a row r = row_of[st[i]] >= 0
    (float64, in row order: as np.bincount adds them)."""
    kern = kernels()
    if kern is not None and st.dtype == np.int32:
        kern.sums_by_row(row_of, np.ascontiguousarray(st), np.ascontiguousarray(weights, dtype=np.int64), counts, sums)
        return
    target = row_of[st]
    hit = target >= 0
    counts += np.bincount(target[hit], minlength=len(counts))
    sums += np.bincount(target[hit], weights=weights[hit].astype(np.float64), minlength=len(sums))


def _overlapping(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, cut: tuple | None) -> np.ndarray:
    """The steps ``rows`` overlapping a time piece's ``cut`` (the others get none of it; all when None)."""
    return rows if cut is None else rows[(take_rows(hi, rows) > cut[0]) & (take_rows(lo, rows) < cut[1])]


class OutsideSteps:
    """Each stepping rank's communication outside its steps (before, between, after): ``add`` each
    RankTime; the partitioned merge makes the table (ops and bytes summed, comm_ns the mean)."""

    def __init__(self, steps: pd.DataFrame):
        self.rows = rows_by_rank(steps["rank"].to_numpy()) if len(steps) else {}
        self.b = steps["t_begin_ns"].to_numpy(np.int64)
        self.e = steps["t_end_ns"].to_numpy(np.int64)
        self.comm: dict = {BEFORE: [], BETWEEN: [], AFTER: []}

    def add(self, r: int, t: RankTime) -> None:
        rows = self.rows.get(r)
        if rows is None:
            return
        total = iv.length(t.comm)
        before = int(iv.covered_before(t.comm, self.b[rows[:1]])[0])
        after = total - int(iv.covered_before(t.comm, self.e[rows[-1:]])[0])
        rows = _overlapping(rows, self.b, self.e, t.cut)
        in_steps = int(iv.length_within(t.comm, self.b[rows], self.e[rows]).sum())
        for code, v in ((BEFORE, before), (AFTER, after), (BETWEEN, total - before - after - in_steps)):
            self.comm[code] += [0] * t.first       # a rank's first piece opens its entry; its pieces add up
            self.comm[code][-1] += v
