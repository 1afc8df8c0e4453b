"""The report: map over the run's files, reduce small -- the one analysis engine.

``analyse(run)`` computes what ``commtrace report`` and ``compare`` print (summary, step and skew
tables, each rank's communication time) without holding more than one rank's ops (step 1,
``rank_map``) or one seq chunk of every rank's collectives (step 2, ``partition_map``) in a task,
and folds the small partial results (``merge``). Tasks run in this process, a process pool (every
core, within ``memory_limit``) or on Dask (``dask=`` / $COMMTRACE_DASK). A run that fits in memory
is one partition and, on request, also holds every op of its window (``op_view``); the figures are
the same in one partition as in many (tests/report/test_partial.py). Percentiles are exact while
the durations fit a quarter of the memory limit, else sketched (``sketch.ALPHA`` relative error).

``scan(run)``: one lazy part per rank for users, each ``load()``-ing its ops as ``commtrace.load`` would.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from ...errors import CommtraceError
from ...trace import reader
from ...trace.rank_ranges import WORLD_STRIDE, world_group_name
from ..check.fates import world_restarts
from ..compare import check_by
from ..step_table import PER_RANK_COLUMNS
from ..memory_policy import default_memory_limit, needs_partitions
from ..window import Window, check_steps
from .rank_banner import processes_of, run_info_of
from .executors import sized_executor, uses_dask
from .cpp_layer import rank_frame
from .merge import PartitionFold, RankFold, cell_summary, table_keys, with_bandwidth
from .partition_map import PartitionTask, map_partition
from .op_view import load_op_view
from .plan import CHUNKS_PER_WORKER, RunPlan, chunk_size, files_by_chunk, plan_run, read_rank
from .progress_bar import Progress
from .rank_map import RankTask, map_rank, piece_size
from .rank_ops import CELL_COLUMNS, RECORD_KEYS
from .region_figures import modules_table, regions_table
from .sketch import ALPHA
from .phase_splits import split_table
from .timeline_map import TimelineFold, map_timeline, timeline_tasks
from .windowing import FirstStartTask, all_bounds, check_phases, first_start, window_lengths

# Peak memory of a task per op it holds (measured on synthetic runs: a rank's frame and
# its interval sets; a partition's records and instance arrays), with headroom.
RANK_TASK_BYTES_PER_OP = 600
PARTITION_BYTES_PER_OP = 400
# Partition tasks submitted per worker before the analysing process computes the summary
# cells' figures (exact percentiles: ~0.1 s for 6.4 M ops), so that work overlaps them.
# Their results are small (aggregates); queued tasks hold no memory until they run.
PARTITIONS_AHEAD = CHUNKS_PER_WORKER
# Below this many op records a run held whole is analysed in this process: starting a pool of
# workers (~0.5-1 s, each importing pandas) costs more than the tasks it would share.
POOL_MIN_RECORDS = 1_000_000


@dataclass
class Report:
    path: str
    ops: int
    by_op: pd.DataFrame
    by_group: pd.DataFrame
    by_phase: pd.DataFrame | None
    steps: object               # analysis.report.StepTables, or None
    skew: dict                  # arrival skew: top, stragglers, by_op, instances (merge.PartitionFold.skew)
    comm_ns: dict               # rank -> communication time
    busbw: float                # bus bandwidth over every collective (compare's summary line)
    exact: bool                 # percentiles exact (else within quantile_error)
    quantile_error: float | None
    executor: str
    workers: int
    ranks: int
    t0_ns: int | None           # the first op's start (rank 0's clock)
    rank_medians: pd.DataFrame  # per_rank_cut: per rank, steps, median step/compute/comm/exposed/ops over them
    per_rank_cut: bool          # steps.per_rank left empty: more than merge.PER_RANK_ROWS_KEPT rows
    ops_per_rank: dict          # rank -> ops
    seconds: dict = field(default_factory=dict)   # per stage wall time
    issues: list = field(default_factory=list)    # reader.TraceIssue (the rank tasks re-read meta files: once each)
    tables: dict = field(default_factory=dict)    # key columns -> summary table (merge.cell_summary), for compare
    info: dict = field(default_factory=dict)      # the banner's numbers (analysis.run_info.info_of)
    processes: list = field(default_factory=list)  # the reader's process summaries (marks, dumps left out)
    regions: pd.DataFrame | None = None           # the regions table (analysis.regions), None: no region
    window: object = None                         # the analysis.window.Window shown (Window(): the whole run)
    bounds: dict | None = None                    # its interval per rank (None: no time range)
    split: pd.DataFrame | None = None             # collectives filed under different phases (phase_splits)
    timeline: object = None                       # the terminal timeline (analysis.timeline.Timeline; timeline_map)
    timeline_marks: pd.DataFrame | None = None    # the marks it draws (the lowest rank's with any in the window)
    by_module: pd.DataFrame | None = None         # the per-module table (analysis.modules), None: no module named
    compute_spans: int = 0                        # compute spans the run recorded (every rank, the whole run)
    whole: bool = True                            # every op fits in memory at once (memory_policy): one partition
    op_view: object = None                        # op_view.OpView: every op of the window (whole runs, on request)

    def summary(self, by) -> pd.DataFrame:
        """The table over ``by``, one of the key sets analysed (the report's, phase+op, ``compare_by``)."""
        t = self.tables.get(tuple(by))
        if t is None:
            raise CommtraceError(f"--by {','.join(by)}: not analysed (analyse's compare_by names the keys)")
        return t


def analyse(run_dir=None, *, dask=None, workers: int | None = None, memory_limit: int | None = None,
            top: int = 10, progress: bool | None = None, exact: bool | None = None,
            compare_by: list | None = None, window=None, timeline_width: int | None = None,
            partitioned: bool = False, op_view: bool = False) -> Report:
    """The report of ``run_dir`` (module doc). ``compare_by``: one more summary key set (of compare.GROUPABLE: its
    cells then carry the keys beyond CELL_COLUMNS) for compare; ``window``: the Window shown (None: the whole
    run); ``timeline_width``: the console width of the terminal timeline (one more map, timeline_map; None: none). The run is
    ``whole`` when every op fits ``memory_limit`` (memory_policy) and neither ``partitioned`` nor Dask
    asks for pieces; then ``op_view`` also holds every op of the window (op_view.OpView)."""
    if window is not None and window.whole_run:
        window = None
    if compare_by is not None:
        check_by(compare_by)
    extra = tuple(dict.fromkeys(k for k in compare_by or () if k not in CELL_COLUMNS))
    extra = tuple(k for k in extra if k not in RECORD_KEYS) + tuple(k for k in extra if k in RECORD_KEYS)
    plan = plan_run(run_dir)
    limit = memory_limit or default_memory_limit()
    per_task = max(1, max(len(m) for m in plan.ranks.values()) * plan.records_per_file * RANK_TASK_BYTES_PER_OP)
    whole = not (partitioned or uses_dask(dask) or needs_partitions(plan.path, limit))
    small = whole and plan.records < POOL_MIN_RECORDS
    ex = sized_executor(dask, workers, small, len(plan.ranks), limit // per_task)
    if exact is None:
        exact = plan.records * 8 <= limit // 4
    chunk = chunk_size(sum(len(m) for m in plan.ranks.values()), plan.records_per_file, limit, ex.workers,
                       PARTITION_BYTES_PER_OP)
    bar = Progress(progress)
    seconds = {}
    try:
        t0 = time.perf_counter()
        first = None
        if window is not None and (window.t_from is not None or window.t_to is not None):
            stage = bar.stage("first op", len(plan.ranks))
            for f in ex.map(first_start, [FirstStartTask(m, plan.refs) for m in plan.ranks.values()]):
                first = f if first is None or (f is not None and f < first) else first
                stage.advance()
        ranks = RankFold()
        stage = bar.stage("ranks", len(plan.ranks))
        tasks = [RankTask(r, metas, plan.refs, exact, chunk, window, first, plan.modules, plan.worlds.get(metas[0]),
                          piece_size(plan.records), plan.group_worlds, extra, plan.bucket_rule)
                 for r, metas in plan.ranks.items()]
        for p in ex.map(map_rank, tasks):
            ranks.add(p)
            stage.advance(p.ops)
        seconds["ranks"] = time.perf_counter() - t0
        ranks.comm = dict(sorted(ranks.comm.items()))     # rank order, whichever task of a pool ended first
        check_phases(window, ranks.windows)
        if window is not None:
            check_steps(window, ranks.first_step, max(ranks.world_steps.values(), default=0) or None)   # step numbers
        cells = ranks.cell_table()
        keys = table_keys(cells) if len(cells) else {"by_op": ["op"], "by_group": ["group", "group_desc", "op"]}
        keys["phase_op"] = ["phase", "op"]
        if compare_by:
            keys["compare"] = list(compare_by)
        t1 = time.perf_counter()
        parts = PartitionFold(top)
        ptasks = _partition_tasks(plan, ranks.index, chunk, keys, top,
                                  None if window is None else (all_bounds(ranks.windows), window.phases),
                                  ranks.layers, extra, ranks.bucket_runs, ranks.pair_runs)
        stage = bar.stage("collectives", len(ptasks))
        results = ex.map(map_partition, ptasks, ahead=PARTITIONS_AHEAD * ex.workers)
        info = _info(plan, ranks, window)
        # The timeline's tasks queue behind the partitions' (they need only the rank stage): the
        # pool runs both without a barrier between, while this process folds what needs no partition.
        tasks = timeline_tasks(plan, ranks, window, timeline_width, info["rank_list"]) \
            if timeline_width and ranks.ops else []
        tl = TimelineFold(tasks)
        lanes = ex.map(map_timeline, tasks) if tasks else ()
        qcache: dict = {}       # the cells' figures while the first partition tasks run
        early = {name: cell_summary(cells, ranks.values, by, qcache) for name, by in keys.items()}
        here = ex.name == "serial"     # the partition tasks run in this process: the step tables after them
        steps, medians = (None, None) if here else (ranks.step_tables(), ranks.medians())
        for p in results:
            parts.add(p)
            stage.advance()
        if here:
            steps, medians = ranks.step_tables(), ranks.medians()
        seconds["partitions"] = time.perf_counter() - t1
        if tasks:
            t2 = time.perf_counter()
            stage = bar.stage("timeline", len(tasks))
            for p in lanes:
                tl.add(p)
                stage.advance(ranks.ops_per_rank.get(p.rank, 0))
            seconds["timeline"] = time.perf_counter() - t2
    finally:
        ex.close()
        bar.close()
    bandwidth = parts.bandwidth         # gathered once, for every table
    tables = {name: with_bandwidth(early[name], bandwidth.get(name)) for name in keys}
    if not len(cells):     # no op (in the window): the empty per-group table has the per-op table's columns
        tables["by_group"] = tables["by_op"].iloc[0:0]
    by_keys = {tuple(by): tables[name] for name, by in keys.items()}
    processes = processes_of(ranks.facts)
    skew = _worlds_named(parts.skew(ranks.op_order()), processes, bool(plan.worlds))
    return Report(plan.path, ranks.ops, tables["by_op"], tables["by_group"], tables.get("by_phase"),
                      steps, skew, ranks.comm, parts.run_busbw(), exact,
                      None if exact else ALPHA, ex.name, ex.workers, len(plan.ranks), ranks.t0, medians,
                      ranks.per_rank_cut, ranks.ops_per_rank, seconds,
                      list(dict.fromkeys(plan.issues + [i for r in sorted(ranks.issues)    # without repeats:
                                                        for i in ranks.issues[r]])),       # both read meta files
                      by_keys,
                      info, processes, regions_table(ranks.regions),
                      window or Window(), all_bounds(ranks.windows),
                      split_table(parts.splits) if tables.get("by_phase") is not None else split_table([]),
                      tl.timeline(), tl.marks, modules_table(ranks.modules), ranks.spans, whole,
                      load_op_view(plan.path, all_bounds(ranks.windows), (window or Window()).phases)
                      if whole and op_view else None)


def _worlds_named(skew: dict, processes: list, several: bool) -> dict:
    """``skew`` with its largest spreads' groups named by their world ("w1:0", check's numbers) where
    they are of several worlds that the names do not tell apart: a process that made its worlds one
    after another (init, destroy, init again) keeps one rank key, its groups their plain names."""
    top = skew["top"]
    numbers = reader.world_numbers(processes) if not several and top["world"].nunique() > 1 else {}
    if not numbers:
        return skew
    group = [g if numbers.get(w) is None else world_group_name(str(g), numbers[w])
             for w, g in zip(top["world"], top["group"])]
    return dict(skew, top=top.assign(group=group))


def _info(plan: RunPlan, ranks: RankFold, window) -> dict:
    info = run_info_of(plan.path, plan.run_id, ranks.facts, ranks.comm, ranks.ops, ranks.t0,
                       window_lengths(ranks.windows))
    info["window"] = (window or Window()).describe()
    if plan.worlds:     # several worlds: their ids by number (rank keys and group labels say "w1")
        ids = {n: pt["worlds"][0] for f in ranks.facts for pt in f.processes if pt.get("worlds")
               for n in [f.rank // WORLD_STRIDE]}
        info["worlds"] = [ids.get(n) for n in range(max(ids, default=-1) + 1)]
        restarts = world_restarts([pt for f in ranks.facts for pt in f.processes])
        if any(restarts.get(w) for w in info["worlds"]):   # only for a run torchrun restarted
            info["world_restarts"] = {n: restarts[w] for n, w in enumerate(info["worlds"]) if restarts.get(w)}
    return info


def _partition_tasks(plan: RunPlan, index: dict, chunk: int, keys: dict, top: int,
                     window: tuple | None = None, layers: dict | None = None,
                     extra: tuple = (), bucket_runs: dict | None = None,
                     pair_runs: dict | None = None) -> list[PartitionTask]:
    """One task per seq chunk (plan.files_by_chunk)."""
    metas = {m[: -len(reader.schema.META_SUFFIX)] + reader.schema.OPS_SUFFIX: m
             for ms in plan.ranks.values() for m in ms}
    layers, bucket_runs = layers or {}, bucket_runs or {}
    indexed = (((metas[ops], ops), chunks) for ops, chunks in index.items() if ops in metas)
    return [PartitionTask(c, chunk, files, plan.refs, keys, top, window,
                          {f[1]: layers[f[1]] for f in files if f[1] in layers},
                          {f[0]: plan.worlds[f[0]] for f in files if f[0] in plan.worlds}, plan.group_worlds, extra,
                          plan.bucket_rule, {f[1]: bucket_runs[f[1]].within(c * chunk, (c + 1) * chunk)
                                             for f in files if f[1] in bucket_runs},
                          {f[1]: pair_runs[f[1]] for f in files if pair_runs and f[1] in pair_runs})
            for c, files in files_by_chunk(indexed)]


@dataclass
class RankPart:
    """One rank's ops, loaded on demand (``load()``: the frame ``commtrace.load`` has for them)."""
    rank: int                   # its rank key (rank_ranges.rank_key: its rank, when the run has one world)
    files: list
    refs: dict
    world: int | None = None    # its world's number when the run has several (plan.RunPlan.worlds)

    def load(self, rank_keys: bool = False) -> pd.DataFrame:
        """``rank_keys``: ranks as the report keys them (rank keys; groups named with their world)."""
        return rank_frame(*read_rank(self.files, self.refs, [], world=self.world if rank_keys else None))

    def mark_tables(self, rank_keys: bool = False):
        """This rank's (spans, marks, regions), on the run's clock, read without its ops (a
        bounded process's spans all, as its ops are not read to tell which they cover)."""
        procs, refs = read_rank(self.files, self.refs, [], records=False, world=self.world if rank_keys else None)
        return reader.build_mark_tables(procs, [], refs)


def load_ranks(parts: list[RankPart]):
    """A reader.Run of just these ranks (ops, spans, marks, regions, process summaries; the run's
    reference clocks), their ranks as the report keys them (RankPart.load's ``rank_keys``)."""
    issues: list = []
    procs, refs = read_rank([m for part in parts for m in part.files], parts[0].refs if parts else {}, issues)
    world_of = {m: part.world for part in parts for m in part.files}
    for p in procs:
        p.world_number = world_of.get(p.meta_path)
    spans, marks, regions = reader.build_mark_tables(procs, issues, refs)
    summaries = [p.summary() for p in procs]
    return reader.Run("", rank_frame(procs, refs), summaries, issues, spans, marks, regions)


def perfetto_pieces(ops_per_rank: dict, max_ops: int) -> list[tuple[list, int | None, int]]:
    """A big run's Perfetto export cut into files of at most ``max_ops`` ops: consecutive ranks
    together while they fit, a rank with more alone in pieces of consecutive ops (time windows).
    Each piece: (ranks, piece number of a split rank or None, pieces of that rank)."""
    out, cur, n = [], [], 0
    for r, k in sorted(ops_per_rank.items()):
        if k > max_ops:
            if cur:
                out.append((cur, None, 1))
                cur, n = [], 0
            pieces = -(-k // max_ops)
            out.extend(([r], i, pieces) for i in range(pieces))
            continue
        if cur and n + k > max_ops:
            out.append((cur, None, 1))
            cur, n = [], 0
        cur.append(r)
        n += k
    if cur:
        out.append((cur, None, 1))
    return out


def piece_span(starts, piece: int, pieces: int) -> tuple[int, int, int | None, int | None]:
    """Piece ``piece`` of ``pieces`` of one rank's ops (``starts``: ascending): (first op, end op),
    as even as they go, and the time range [t_lo, t_hi) it owns, its first op's start to the next
    piece's (None: open, first and last piece). The ranges cut the time line without gap or overlap,
    so a span, mark or region belongs to the one piece its start falls in (docs/report.md, "Big runs")."""
    n = len(starts)
    lo, hi = piece * n // pieces, (piece + 1) * n // pieces
    t_lo = int(starts[lo]) if piece > 0 and lo < n else None
    t_hi = int(starts[hi]) if piece < pieces - 1 and hi < n else None
    return lo, hi, t_lo, t_hi


def steps_table(run_dir=None) -> pd.DataFrame:
    """``commtrace.load(run, "steps")``: a row per step and rank (several worlds: rank in world, world id)."""
    rep = analyse(run_dir, progress=False)
    steps = rep.steps.per_rank if rep.steps is not None else pd.DataFrame(columns=PER_RANK_COLUMNS)
    if (worlds := rep.info.get("worlds")) and len(steps):
        key = steps["rank"].to_numpy()
        steps = steps.assign(rank=key % WORLD_STRIDE)
        steps.insert(1, "world", [worlds[k] for k in key // WORLD_STRIDE])
    return steps


def scan(run_dir=None) -> list[RankPart]:
    """One lazy part per rank, to analyse big runs yourself (e.g. ``dask.delayed(part.load)()``)."""
    plan = plan_run(run_dir)
    return [RankPart(r, metas, plan.refs, plan.worlds.get(metas[0])) for r, metas in plan.ranks.items()]
