"""``commtrace check``: the findings of a run by map/reduce -- the one check engine.

1. meta lines of every file, in this process (as ``reader.load_run`` reads them);
2. per rank (``map_check_rank``): its records as ``load_run`` reads them (damage, lost records,
   issues: what the fates need), the seq-chunk index of its ops files (sends and recvs indexed by
   their pair_seq, numbered here over the whole process: ``plan.pair_indexed``), per group its
   highest seq and the member lists its ops name;
3. per seq chunk (``map_check_chunk``): the frame of the chunk's records of every file (whole
   instances), classified as ``check.diagnose`` does (with step 2's run-wide highest seqs) into
   verdicts (capped to what the findings show, counts exact), the rows of the seqs they name, the
   first recvs without their send, the sends left open (``check.OpenP2P``: a recv from any source
   whose sender is not known may take a send of another chunk) and the chunk's RunFacts;
4. the fold (``CheckFold``) merges those; ``check.diagnose_reduced`` runs on the small result.

A run that fits in memory with fewer than ``POOL_MIN_RECORDS`` records is one chunk, checked in
this process; else no task holds more than one rank's records or one chunk's frame, and the fold
holds per group and rank a few numbers, a straggler lag per complete instance and a few dozen
instances' rows per group. C++-layer files merge into their process's Python rows over the whole
process, so a run that has them is checked in one chunk.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import CommtraceError
from ...trace import reader
from ...trace.group_ranks import ranks_of
from ...trace.schema import P2P_OPS
from .. import bounded_coverage
from ..check import OpenP2P, P2P_SHOWN, diagnose_reduced, p2p_loose_ends
from ..check.facts import GroupVerdict, RunFacts, classify_frame, frame_facts
from ..check.fates import rank_fates
from .. import memory_policy
from . import POOL_MIN_RECORDS
from .executors import sized_executor, uses_dask
from .plan import ChunkIndex, cached_process, chunk_records, chunk_size, files_by_chunk, pair_indexed
from .progress_bar import Progress
from .bounded_files import ops_records_on_disk
from .cpp_layer import has_cpp, rank_frame

# Peak memory of a chunk task per op it holds: the chunk's frame (reader.build_frame,
# ~200 B/op) and the groupby temporaries of classify_group, with headroom.
CHUNK_BYTES_PER_OP = 800
# A rank task: its records (32 B/op), their validity masks and the chunk index, with headroom.
RANK_BYTES_PER_OP = 200


# What step 2 carries back of each ProcessTrace: what load_run's Run summary shows of it.
_CARRIED = ("n_records", "complete", "lost", "n_lost", "damage", "damage_any", "meta_damage", "cut",
            "coverage")


@dataclass
class FileFacts:
    """What step 2 learnt about one process's files."""
    index: int                  # the file's place in reader.find_traces order
    carried: dict               # ProcessTrace attribute -> value (_CARRIED)
    issues: list                # reader.TraceIssue of read_process, in order
    span_issues: list           # of its spans file (load_run reads spans after every ops file)
    chunks: tuple               # plan.ChunkIndex.of its ops file (bounded: chunk tasks read it whole)
    last_seq: dict              # (world, group) -> highest collective seq of this process
    group_ranks: dict           # (world, group) -> its global ranks (trace.group_ranks.ranks_of; () unknown)
    pair_runs: object = None    # trace.p2p_order.PairSeqRuns of its sends and recvs (None: it has none)


@dataclass
class CheckRankTask:
    rank: int
    files: list                 # (index, meta path)
    chunk: int


@dataclass
class CheckChunkTask:
    chunk: int
    chunk_size: int
    files: list                 # (index, meta path, ops path, first record, last record), in file order
    refs: dict                  # world id -> meta path of its reference (rank-0) process
    members: dict               # (world, group) -> member ranks
    last_seq: dict              # (world, group) -> {rank: highest seq}
    fates: dict                 # rank -> check.RankFate
    bounded: list               # the bounded processes' summaries (bounded_coverage.judged_frame)
    pair_runs: dict = field(default_factory=dict)   # ops path -> its FileFacts.pair_runs
    facts_only: bool = False    # bounded runs' first pass: the facts of the judged frame


@dataclass
class CheckChunkPartial:
    chunk: int
    ops: int
    facts: RunFacts
    verdicts: dict              # (world, group) -> GroupVerdict (capped)
    rows: pd.DataFrame          # the collectives' rows of the seqs the verdicts name
    p2p: pd.DataFrame           # the first recvs from a named peer without their send (frame order)
    open_p2p: OpenP2P           # the sends without their recv and the recvs from any source (one may
                                # take a send of another chunk: its seq counts such recvs)


# -- step 2: one rank ---------------------------------------------------------------

def map_check_rank(task: CheckRankTask) -> list[FileFacts]:
    out, chunks = [], ChunkIndex(task.chunk)
    for index, meta in task.files:
        issues: list = []
        pt = reader.read_process(meta, issues, each=chunks.each(meta))     # indexed as read
        if pt is None:
            continue
        span_issues: list = []
        reader.read_spans(pt, span_issues)           # its damage, as load_run's build_mark_tables finds it
        last_seq, group_ranks = _collective_groups(pt)
        carried = {k: getattr(pt, k) for k in _CARRIED}
        index_of, pair_runs = pair_indexed(pt, chunks.of(pt), task.chunk)    # p2p ops: cut by pair_seq
        out.append(FileFacts(index, carried, issues, span_issues, index_of, last_seq, group_ranks, pair_runs))
    return out


def _collective_groups(pt) -> tuple[dict, dict]:
    """Per (world, group) of the process's collective records: the highest seq, and the
    group's global ranks (what the frame's group_ranks rows would show)."""
    rec = pt.records
    last, ranks = {}, {}
    if rec is None or not len(rec):
        return last, ranks
    p2p_sigs = [i for i, s in pt.sigs.items() if reader.str_or_none(s.get("op")) in P2P_OPS]
    coll = rec[~np.isin(rec["sig"], np.array(p2p_sigs, dtype=np.int64))] if p2p_sigs else rec
    for gid in np.unique(coll["group"]).tolist():
        g = pt.groups.get(gid, {})
        key = (reader.str_or_none(g.get("world_id")), reader.str_or_none(g.get("name")))
        if key[0] is None or key[1] is None:
            continue                                 # the frame's groupby drops missing keys
        last[key] = int(coll["seq"][coll["group"] == gid].max())
        ranks[key] = ranks_of(g.get("ranks")) or ()
    return last, ranks


# -- step 3: one seq chunk ----------------------------------------------------------

def map_check_chunk(task: CheckChunkTask) -> CheckChunkPartial:
    procs, refs = [], {}
    for _, meta, ops, lo, hi in task.files:
        pt = cached_process(meta)
        if pt is None:
            continue
        runs = task.pair_runs.get(ops)
        rec = chunk_records(pt, lo, hi, task.chunk, task.chunk_size, pairs=runs)
        if len(rec):
            procs.append(dataclasses.replace(pt, records=rec, pair_runs=runs))
    for wid, meta in task.refs.items():
        ref = cached_process(meta)
        if ref is not None:
            refs[wid] = ref
    df = rank_frame(procs, refs, world_ranks=True) if procs else reader.empty_frame()   # as load_run's
    df = bounded_coverage.judged_frame(df, task.bounded)        # bounded traces: what their files can show
    facts = frame_facts(df, task.members)
    if task.facts_only:
        return CheckChunkPartial(task.chunk, len(df), facts, {}, _plain([]), _plain([]), OpenP2P())
    verdicts, kept = classify_frame(df, task.members, task.last_seq, task.fates)
    recvs, open_p2p = p2p_loose_ends(df)
    return CheckChunkPartial(task.chunk, len(df), facts, verdicts, _plain(kept),
                             _plain([pd.DataFrame(recvs[:P2P_SHOWN])]) if recvs else _plain([]), open_p2p)


def _plain(frames: list) -> pd.DataFrame:
    """Rows that leave the task: categoricals as plain values (each chunk has its own categories)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames)
    return df.astype({c: object for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)})


# -- step 4: the fold -----------------------------------------------------------------

@dataclass
class CheckFold:
    members: dict
    facts: RunFacts = field(default_factory=RunFacts)
    verdicts: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)       # (world, group) -> rows of the seqs its verdict names
    p2p: pd.DataFrame = field(default_factory=pd.DataFrame)   # the first recvs from a named peer without their send
    open_p2p: OpenP2P = field(default_factory=OpenP2P)
    ops: int = 0

    def add(self, part: CheckChunkPartial) -> None:
        self.ops += part.ops
        self.facts.merge(part.facts)
        for key, v in part.verdicts.items():
            self.verdicts.setdefault(key, GroupVerdict()).merge(v)
        if len(part.rows):
            for (w, g), gdf in part.rows.groupby(["world", "group"], sort=False, dropna=False):
                key = (reader.str_or_none(w), reader.str_or_none(g))
                self.rows[key] = pd.concat([self.rows[key], gdf]) if key in self.rows else gdf
        for key, rows in self.rows.items():               # drop the rows no longer shown
            keep = self.verdicts[key].seqs()
            self.rows[key] = rows[rows["seq"].isin(keep).to_numpy()]
        if len(part.p2p):
            p = pd.concat([self.p2p, part.p2p]) if len(self.p2p) else part.p2p
            self.p2p = p.sort_values(["t_start_ns", "rank"], kind="stable").head(P2P_SHOWN)
        self.open_p2p.merge(part.open_p2p)

    def frame(self) -> pd.DataFrame:
        """The reduced frame, in the one frame's row order (start time, then rank)."""
        recvs = [r for _, r in self.p2p.iterrows()]
        p2p = self.open_p2p.unmatched(recvs)[:P2P_SHOWN]         # what check.unmatched_p2p shows of the run
        parts = [r for r in self.rows.values() if len(r)] + ([_plain([pd.DataFrame(p2p)])] if p2p else [])
        if not parts:
            return reader.empty_frame()
        return pd.concat(parts).sort_values(["t_start_ns", "rank"], kind="stable").reset_index(drop=True)


# -- the driver -------------------------------------------------------------------------

@dataclass
class RunCheck:
    """A check's result: the run (no op frame: ``run.frame`` holds only the reduced
    rows) and its findings, with how the work was done."""
    run: object
    findings: list
    ops: int
    executor: str
    workers: int
    chunks: int
    seconds: dict


def check_run(run_dir=None, *, dask=None, workers: int | None = None, memory_limit: int | None = None,
              progress: bool | None = None, partitioned: bool = False) -> RunCheck:
    """``check.diagnose(load_run(run_dir))``'s findings by map/reduce (module doc): one chunk
    when the run fits ``memory_limit`` and neither ``partitioned`` nor Dask asks for many."""
    run_dir = reader.newest_run() if run_dir is None else str(run_dir)
    limit = memory_policy.memory_limit(memory_limit)
    # per file: (index, meta, ProcessTrace or None, issues)
    read = [(i, *file) for i, file in enumerate(reader.read_run_files(run_dir, records=False))]
    procs = [pt for _, _, pt, _ in read if pt is not None]
    whole = not (partitioned or uses_dask(dask)
                 or memory_policy.needs_partitions(run_dir, limit, CHUNK_BYTES_PER_OP))
    if has_cpp(procs) and not whole:
        raise CommtraceError(f"{run_dir}: a run with C++-layer trace files is checked in one piece (their ops "
                             "merge into the Python layer's over the whole process), and this one does not fit "
                             "the memory limit or --partitioned / --dask asks for pieces")
    ranks: dict = {}
    for i, m, pt, _ in read:
        if pt is not None and pt.rank is not None:
            ranks.setdefault(pt.rank, []).append((i, m))
    records = {i: ops_records_on_disk(pt.ops_path) for i, _, pt, _ in read
               if pt is not None and pt.rank is not None}
    per_file = max(records.values(), default=0)
    one_chunk = whole and (has_cpp(procs) or sum(records.values()) < POOL_MIN_RECORDS)
    rank_records = max((sum(records[i] for i, _ in fs) for fs in ranks.values()), default=0)
    per_task = max(1, rank_records * RANK_BYTES_PER_OP)
    ex = sized_executor(dask, workers, one_chunk, len(ranks), limit // per_task)
    chunk = 1 << 30 if one_chunk else chunk_size(len(records), per_file, limit, ex.workers,
                                                 CHUNK_BYTES_PER_OP)
    bar = Progress(progress)
    seconds: dict = {}
    try:
        t0 = time.perf_counter()
        stage = bar.stage("ranks", len(ranks))
        facts_of: dict = {}
        for part in ex.map(map_check_rank, [CheckRankTask(r, fs, chunk) for r, fs in sorted(ranks.items())]):
            for f in part:
                facts_of[f.index] = f
            stage.advance(sum(f.carried["n_records"] for f in part))
        seconds["ranks"] = time.perf_counter() - t0
        run = _run_of(run_dir, read, facts_of)
        members, last_seq, order = _groups(read, facts_of)
        bounded = [p for p in run.processes if isinstance(p.get("coverage"), dict)]
        tasks = _chunk_tasks(read, facts_of, chunk, members, last_seq, rank_fates(run), bounded)
        t1 = time.perf_counter()
        if bounded:
            # The one frame judges a collective only if no bounded member dropped it: the
            # highest seqs that classify_group compares with are those of the judged frame.
            judged = RunFacts()
            for part in ex.map(map_check_chunk, [dataclasses.replace(t, facts_only=True) for t in tasks]):
                judged.merge(part.facts)
            last_seq = {k: g.last_entered for k, g in judged.groups.items()}
            tasks = [dataclasses.replace(t, last_seq=last_seq) for t in tasks]
        fold = CheckFold(members)
        stage = bar.stage("collectives", len(tasks))
        for part in ex.map(map_check_chunk, tasks):
            fold.add(part)
            stage.advance(part.ops)
        seconds["chunks"] = time.perf_counter() - t1
    finally:
        ex.close()
        bar.close()
    facts = fold.facts
    facts.groups = {k: facts.groups[k] for k in sorted(facts.groups, key=order)}
    for k, g in facts.groups.items():
        g.members = members[k]
    facts.stragglers = {k: facts.stragglers[k] for k in sorted(facts.stragglers, key=order)}
    run.frame = fold.frame()
    findings = diagnose_reduced(run, run.frame, facts, fold.verdicts)
    return RunCheck(run, findings, fold.ops, ex.name, ex.workers, len(tasks), seconds)


def _run_of(run_dir: str, read: list, facts_of: dict):
    """The reader.Run ``load_run`` would give, without its frame: each process's
    summary and every issue, in load_run's order."""
    procs, issues, span_issues = [], [], []
    for i, m, pt, meta_issues in read:
        f = facts_of.get(i)
        if pt is not None and pt.rank is None:       # no process group: no ops to speak of, read here
            meta_issues = []
            pt = reader.read_process(m, meta_issues)
            if pt is not None:
                reader.read_spans(pt, span_issues)
        elif f is not None:
            for k, v in f.carried.items():
                setattr(pt, k, list(v) if isinstance(v, list) else v)
            meta_issues = f.issues
            span_issues += f.span_issues
        issues += meta_issues
        if pt is not None:
            procs.append(pt)
    reader.describe_clocks(procs)
    issues += reader.missing_ranks(procs)
    issues += span_issues
    return reader.Run(os.path.abspath(run_dir), reader.empty_frame(), [p.summary() for p in procs if p.rank is not None],
                      issues, unranked=[p.summary() for p in procs if p.rank is None])


def _groups(read: list, facts_of: dict):
    """Per (world, group): its members (as check.matching._group_members reads them from
    the frame), each rank's highest seq, and the sort key of the frame's group order
    (categories in the order the files define them)."""
    ranks: dict = {}
    last_seq: dict = {}
    worlds: dict = {}
    names: dict = {}
    for i, m, pt, _ in read:
        f = facts_of.get(i)
        if f is None:
            continue
        if f.carried["n_records"]:                 # build_frame's categories: files with records, in order
            for g in pt.groups.values():
                worlds.setdefault(reader.str_or_none(g.get("world_id")), len(worlds))
                names.setdefault(reader.str_or_none(g.get("name")), len(names))
        for key, s in f.last_seq.items():
            seqs = last_seq.setdefault(key, {})
            r = reader.rank_in_world(pt, key[0])      # the frame's rank of its rows in that world
            seqs[r] = max(s, seqs.get(r, s))
            ranks.setdefault(key, set()).update(f.group_ranks.get(key, ()))
    members = {key: sorted(ranks[key] or seqs) for key, seqs in last_seq.items()}   # none named: who has ops
    return members, last_seq, lambda key: (worlds.get(key[0], len(worlds)), names.get(key[1], len(names)))


def _chunk_tasks(read: list, facts_of: dict, chunk: int, members: dict, last_seq: dict, fates: dict,
                 bounded: list) -> list:
    """One task per seq chunk any file has records in; per file, the record range holding
    that chunk's records (of any group)."""
    refs = {wid: pt.meta_path for wid, pt in
            reader.reference_processes([pt for _, _, pt, _ in read if pt is not None]).items()}
    indexed = (((i, m, pt.ops_path), facts_of[i].chunks) for i, m, pt, _ in read if i in facts_of)
    pairs = {pt.ops_path: facts_of[i].pair_runs for i, _, pt, _ in read
             if i in facts_of and facts_of[i].pair_runs is not None}
    return [CheckChunkTask(c, chunk, sorted(files), refs, members, last_seq, fates, bounded,
                           {f[2]: pairs[f[2]] for f in files if f[2] in pairs})
            for c, files in files_by_chunk(indexed)]
