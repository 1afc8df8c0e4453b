"""Map step 1: one rank's files -> its partial results (small next to its ops).

Everything the report computes per rank is computed here (``find_steps``,
``locate_ops``, ``StepFigures``, ``OutsideSteps``, ``RankTimes``), on this rank's ops only, gathered straight from
its records (``rank_ops``: no frame): the step table rows, communication time,
the ops outside steps, and the summary cells (per CELL_COLUMNS key and rank: ops,
summed duration, known durations, bytes) with the durations
themselves (exact percentiles) or a LogSketch of them. It also indexes where each
(group, seq chunk) lies in each ops file, so that a partition task reads only its
slice (records are in call order: a group's seq grows along the file)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace import reader
from ...trace.annotations import BucketRule
from .. import intervals as iv
from ..native_ext import kernels
from ..step_table import OutsideSteps, RankTimes, StepFigures, busy_times, in_pieces, ops_per_step
from ..steps import AFTER, BEFORE, BETWEEN, NO_STEPS, begin_at_first_op, compute_spans, find_steps, locate_ops
from .rank_banner import rank_facts
from .cpp_layer import rank_ops_of
from .region_figures import RankRegions, rank_modules
from .windowing import applied_to_rank, rank_window
from .packed import PackedColumns, pack
from .plan import ChunkIndex, pair_indexed, read_rank
from .rank_ops import CELL_COLUMNS, RankOps, selected_ops
from .sketch import LogSketch


@dataclass
class RankTask:
    rank: int
    metas: list                 # meta paths of the rank's processes
    refs: dict                  # world id -> meta path of the reference (rank-0) process
    exact: bool                 # keep durations (exact percentiles) instead of sketches
    chunk: int                  # seq chunk size of the partitions (see plan)
    window: object = None       # analysis.window.Window shown (None: the whole run)
    t0: int | None = None       # the run's first op start (--from/--to count from it)
    modules: bool = True        # the run names a module (plan): else no per-module figures
    world: int | None = None    # the rank's world number when the run has several (plan.RunPlan.worlds)
    piece: int = 0              # ops per time piece of the interval figures (RankTimes.pieces; 0: the rank whole)
    group_worlds: dict = field(default_factory=dict)   # world id -> number, several worlds (plan.RunPlan.group_worlds)
    extra: tuple = ()           # the rank_ops.CELL_EXTRA_KEYS its cells also carry (compare's --by)
    bucket_rule: BucketRule = BucketRule()   # the run's (plan.RunPlan.bucket_rule): --by bucket, params


# Interval figures walk a rank in time pieces of ~1/PIECES_PER_RUN of the run's ops (at least MIN_PIECE_OPS):
# a rank holding much of a run (few ranks) builds its sets (~70 B per op) piece by piece; one of many ranks, whole.
PIECES_PER_RUN, MIN_PIECE_OPS = 32, 4096
CHUNK_OPS = 1 << 16     # a pass over a whole rank's ops (sums, maxima) reads this many at a time: small temporaries
RECORD_PIECE = 1 << 14  # records read (checked, gathered, timed) at a time: ~130 B of temporaries per record


def piece_size(run_ops: int) -> int:
    return max(MIN_PIECE_OPS, run_ops // PIECES_PER_RUN)


@dataclass
class RankPartial:
    rank: int
    ops: int
    issues: list
    cells: dict                  # CELL_COLUMNS + rank (lists of strings, "-" for none) + ops, dur, known,
                                 # nbytes (float64 arrays): merge.RankFold.cell_table makes the one table
    values: list                 # per cells row: float32/float64 durations (exact) or a LogSketch
    per_rank: PackedColumns      # step_table.PER_RANK_COLUMNS of this rank's steps (packed for the trip)
    comm_ns: dict                # rank -> communication time (union of its ops)
    outside: dict                # where code -> [ops, bytes, [comm per rank]] (+ NO_STEPS ranks)
    total_steps: int
    t0: int | None               # the rank's first op start (rank 0's clock)
    op_order: tuple              # (first meta file name, op names in the frame's category order)
    index: dict = field(default_factory=dict)   # ops path -> (group << 32 | chunk, first, last record)
    facts: object = None         # rank_banner.RankFacts: what the report's banner needs of this rank
    regions: dict = field(default_factory=dict)   # regions.RegionFigures.acc of this rank
    window: object = None        # windowing.RankWindow (None: no window)
    layers: dict = field(default_factory=dict)   # C++ ops path -> cpp_layer.CppFile
    modules: dict = field(default_factory=dict)   # modules.ModuleFigures.acc of this rank
    spans: int = 0               # compute spans the rank recorded (the whole run's, not the window's)
    first_step: int = 0          # the lowest step the rank took (0: none)
    bucket_runs: dict = field(default_factory=dict)   # ops path -> bucket_keys.BucketRuns (--by bucket, params)
    pair_runs: dict = field(default_factory=dict)     # ops path -> p2p_order.PairSeqRuns (files with sends/recvs)


def map_rank(task: RankTask) -> RankPartial:
    issues: list = []
    files = ChunkIndex(task.chunk)      # indexed as they are checked: one read before the gather's
    procs, refs = read_rank(task.metas, task.refs, issues, world=task.world, piece=RECORD_PIECE, index=files)
    index = {p.ops_path: files.of(p) for p in procs}       # records not held whole
    pair_runs = {}
    for p in procs:         # p2p ops are cut into chunks by pair_seq: numbered here, over the whole process
        index[p.ops_path], runs = pair_indexed(p, index[p.ops_path], task.chunk)
        if runs is not None:
            pair_runs[p.ops_path] = runs
    spans, _, region_spans = reader.build_mark_tables(procs, issues, refs, user_marks=False)
    reader.describe_clocks(procs, refs)     # before build_frame takes the records (clock bounds use them)
    lean = RECORD_PIECE if in_pieces(sum(p.n_records for p in procs), task.piece) else 0   # few ranks:
    steps = find_steps(spans)           # before the ops: its per-span temporaries not beside them
    spans = compute_spans(spans)
    spans = _times_of(spans) if lean else spans
    busy = busy_times(spans, CHUNK_OPS)     # needs the spans alone: its union's buffers not beside the op columns
    ops, layers = rank_ops_of(procs, refs, task.rank, lean, task.group_worlds, task.extra,
                                task.bucket_rule)   # held narrower, read in pieces
    for p in procs:         # gathered into ``ops``: the records (32 B/op) leave the task's peak
        p.records = None
    a = ops.arrays if ops is not None else None
    steps = begin_at_first_op(steps, spans, a)
    applied = applied_to_rank(task.window, ops, steps, task.t0)
    regions = RankRegions(region_spans, a, applied)
    modules = rank_modules(ops, applied) if task.modules else None
    window, n_spans = rank_window(applied, ops, spans), len(spans) if spans is not None else 0
    if a is None:
        regions.add_without_ops(spans)
    times = None if a is None else RankTimes(ops.waits, a, spans, applied.selected if applied is not None else None,
                                             applied.bounds if applied is not None else None, CHUNK_OPS, busy)
    del spans, region_spans, busy   # each rank's busy time and tails (RankTimes) are what the figures read of them
    if a is not None:
        ops.waits.grad = None       # read by the tails alone
    per_rank, comm, outside = _step_parts(times, a, steps, regions, applied, modules, task.piece)
    # what only the figures above read goes before the cells (their peak) and the packing (its holes take the
    # packing's temporaries): the step table travels packed
    steps_taken = (int(steps["step"].max()), int(steps["step"].min())) if len(steps) else (0, 0)
    del steps, times
    if ops is not None:
        ops.waits = None
    per_rank = pack(per_rank)
    shown = ops if applied is None else selected_ops(ops, applied.selected)
    facts = rank_facts(task.rank, procs, shown)
    if ops is not None and ops.offsets is not None:     # the ends are read no more (lean: the durations come from
        ops.arrays.end = shown.arrays.end = None        # the offsets): their block is the cells' durations' hole
    cells, values = _cells(shown, task.rank, task.exact, task.extra)
    n = len(shown.arrays.start) if shown is not None else 0
    first = int(a.start.min()) if a is not None and len(a.start) else None
    return RankPartial(task.rank, n, issues, cells, values, per_rank, comm, outside, steps_taken[0], first,
                       (os.path.basename(task.metas[0]), ops.op_names if ops is not None else []), index, facts,
                       regions.acc, window, layers, modules.acc if modules is not None else {}, n_spans,
                       steps_taken[1], ops.bucket_runs if ops is not None else {}, pair_runs)


def _times_of(spans: pd.DataFrame | None) -> pd.DataFrame | None:
    """The spans' columns read after find_steps (RankTimes, rank_window; 6.5 of their 19 B/op less held; the
    rank's a broadcast view when it is one rank's: 4 B per span less)."""
    if spans is None:
        return None
    rank = spans["rank"].to_numpy()
    one = len(rank) and rank.min() == rank.max()
    return pd.DataFrame({"rank": np.broadcast_to(rank[:1].copy(), len(rank)) if one else spans["rank"],
                         **{c: spans[c] for c in ("phase", "t_begin_ns", "t_end_ns")}},
                        copy=False)    # views: the other columns go with the frame


def _step_parts(times, a, steps, regions, applied=None, modules=None, piece: int = 0):
    if a is None:
        return {}, {}, {}
    sel = applied.selected if applied is not None else None
    op_step, where = locate_ops(a, steps)     # after RankTimes: its tails' temporaries beside less per-op columns
    # ops and bytes per where code (only ranks with steps get codes other than NO_STEPS; the byte sums are
    # float64, exact below 2**53 in any order: summed a chunk at a time, without an int64 or float copy of every op's)
    w, nb = (where, a.nbytes) if sel is None else (where[sel], a.nbytes[sel])
    ops, nbytes = np.zeros(NO_STEPS + 1, np.int64), np.zeros(NO_STEPS + 1)
    for i in range(0, len(w), CHUNK_OPS):
        ops += np.bincount(w[i:i + CHUNK_OPS], minlength=NO_STEPS + 1)
        nbytes += np.bincount(w[i:i + CHUNK_OPS], weights=nb[i:i + CHUNK_OPS], minlength=NO_STEPS + 1)
    m = (where == NO_STEPS) if sel is None else (where == NO_STEPS) & sel
    no_steps = sorted(set(np.unique(a.rank[m]).tolist()))
    del w, m, where             # counted: neither beside the per-step sums below
    shown_steps = steps[applied.steps_in].reset_index(drop=True) if applied is not None else steps
    counts = ops_per_step(shown_steps, a, op_step, sel, CHUNK_OPS)
    del op_step                 # counted per step: 4 B/op less beside the step table's sums and the pieces
    figures = StepFigures(shown_steps, *counts)
    outside = OutsideSteps(steps)
    comm = {}
    for r in times.ranks():
        for t in times.pieces(r, piece):
            comm[r] = comm.get(r, 0) + iv.length(t.comm)
            figures.add(r, t)
            outside.add(r, t)
            regions.add(r, t.comm, t.first)
            if modules is not None:
                modules.add(r, t)
            del t                   # its sets not beside the next piece's
    parts = {c: [int(ops[c]), int(nbytes[c]), list(outside.comm[c])] for c in (BEFORE, BETWEEN, AFTER)}
    parts[NO_STEPS] = [int(ops[NO_STEPS]), int(nbytes[NO_STEPS]), no_steps]
    return figures.columns(), comm, parts


CELL_TABLE_COLUMNS = list(CELL_COLUMNS) + ["rank", "ops", "dur", "known", "nbytes"]   # nbytes: not the key "bytes"


def _cells(ops: RankOps | None, rank: int, exact: bool, extra: tuple = ()) -> tuple[dict, list]:
    """One rank's summary cells with ops as CELL_TABLE_COLUMNS columns (then ``extra``'s), and per cell its
    durations (float32 when lossless) or their LogSketch."""
    if ops is None:
        return {}, []
    a, n, dur = ops.arrays, len(ops.cells), ops.durations(CHUNK_OPS)
    ops.offsets = None          # read no more: their block is the durations by cell's hole (no heap above it)
    f = cell_figures(ops.cell, dur, a.nbytes, n)
    keep = np.flatnonzero(f.ops > 0).tolist()
    columns = {c: [ops.cells[k][i] for k in keep] for i, c in enumerate(CELL_COLUMNS + extra)}
    columns["rank"] = [str(rank)] * len(keep)
    columns.update(ops=f.ops[keep], dur=f.dur[keep], known=f.known[keep], nbytes=f.nbytes[keep])
    values = []
    for i in keep:
        seg = f.values[f.bounds[i]:f.bounds[i + 1]]
        if exact:
            values.append(seg.astype(np.float32) if f.exact32[i] else seg)
        else:
            values.append(LogSketch.of(seg))
    return columns, values


@dataclass
class CellFigures:
    """Per summary cell of one rank (float64, added in row order as np.bincount adds them)."""
    ops: np.ndarray
    dur: np.ndarray             # summed known durations
    known: np.ndarray           # how many durations are known
    nbytes: np.ndarray
    values: np.ndarray          # the known durations, cell by cell, each cell's in row order
    bounds: np.ndarray          # cell i's: values[bounds[i]:bounds[i + 1]]
    exact32: np.ndarray         # float32 holds cell i's durations exactly


def cell_figures(cell: np.ndarray, dur: np.ndarray, nbytes: np.ndarray, n: int) -> CellFigures:
    """The summary figures of ``n`` cells from each op's cell, duration (NaN: unknown) and bytes."""
    kern = kernels()
    if kern is not None and len(cell):          # no op: numpy's (np.bincount's dtypes of empty weights)
        f = CellFigures(*(np.zeros(n) for _ in range(4)), np.empty(len(cell)), np.empty(n + 1, np.int64),
                        np.empty(n, np.int8))
        kern.cell_figures(_signed(cell), np.ascontiguousarray(dur, dtype=np.float64), _signed(nbytes), f.ops, f.dur,
                          f.known, f.nbytes, f.bounds, f.values, f.exact32)     # narrow columns read as held
        f.values = f.values[:f.bounds[-1]]
        f.exact32 = f.exact32.astype(bool)
        return f
    known = ~np.isnan(dur)
    order = np.argsort(cell.astype(np.int16 if n < 32_000 else np.int64), kind="stable")
    sorted_known = known[order]
    values = dur[order][sorted_known]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(cell[known], minlength=n))))
    small = values.astype(np.float32)
    lossy = np.bincount(cell[order][sorted_known], weights=(small.astype(np.float64) != values).astype(np.float64),
                        minlength=n) > 0
    return CellFigures(np.bincount(cell, minlength=n).astype(np.float64),
                       np.bincount(cell, weights=np.where(known, dur, 0.0), minlength=n),
                       np.bincount(cell, weights=known.astype(np.float64), minlength=n),
                       np.bincount(cell, weights=nbytes.astype(np.float64), minlength=n), values, bounds, ~lossy)


def _signed(x: np.ndarray) -> np.ndarray:
    """A column as the kernel reads it: contiguous signed integers of its own width (no int64 copy)."""
    x = np.ascontiguousarray(x)
    return x if x.dtype.kind == "i" else x.astype(np.int64)

