"""Which files a run has and how the work over them is cut (meta lines only: cheap).

Per-rank figures come from a rank's own files (a task per rank); cross-rank ones (matching, skew,
bandwidth) from partitions of the collectives by seq (sends and recvs by pair_seq: trace.p2p_order): a
partition task reads, from every file, only the records of its seq chunk (``RankPartial.index``)."""
from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field

import numpy as np

from ...trace import reader, records
from ...trace.p2p_order import PairSeqRuns, chunk_seqs, pair_seq_runs
from ...trace.schema import OP_RECORD, P2P_OPS
from ...trace.annotations import BucketRule, bucket_rule
from ...trace.rank_ranges import rank_key
from ..arrays import NA_KEY
from ..run_info import no_rank_error
from .bounded_files import is_bounded, ops_records_on_disk


@dataclass
class RunPlan:
    path: str
    ranks: dict                 # rank key (world and rank: rank_ranges.rank_key) -> [meta paths of its processes]
    refs: dict                  # world id -> meta path of its rank-0 process (the reference clock)
    records: int                # op records on disk (from the file sizes)
    records_per_file: int       # the most in one file
    issues: list = field(default_factory=list)   # reader.TraceIssue of the meta files
    run_id: str | None = None        # the run id most files carry (reader.check_run_ids)
    modules: bool = True        # a sig names a module: else the run has no per-module table to compute
    worlds: dict = field(default_factory=dict)   # meta path -> world number (reader.number_worlds; {}: one world)
    # world id -> number of every world a rank made (reader.world_numbers; {}: one world): the summary
    # tables name groups by their own world ("w1:0"), also those of a process that re-created its world
    group_worlds: dict = field(default_factory=dict)
    bucket_rule: BucketRule = BucketRule()      # whether ops get bucket numbers, params from DDP layouts


def plan_run(run_dir: str | None) -> RunPlan:
    run_dir = reader.newest_run() if run_dir is None else str(run_dir)
    procs, issues = reader.run_processes(reader.read_run_files(run_dir, records=False))   # this run's files only:
    numbers = reader.number_worlds(procs)      # another run's worlds are not numbered (read_run_files' one_run)
    run_id = reader.check_run_ids([p.summary() for p in procs])[0]     # the one id they share
    ranked = [p for p in procs if p.rank is not None]
    if not ranked:
        raise no_rank_error(os.path.abspath(run_dir), [p.summary() for p in procs])
    ranks: dict = {}
    for p in ranked:
        ranks.setdefault(rank_key(numbers.get(p.meta_path, 0), p.rank), []).append(p.meta_path)
    refs = {wid: pt.meta_path for wid, pt in reader.reference_processes(procs).items()}
    sizes = [ops_records_on_disk(p.ops_path) for p in ranked]
    found = issues + reader.missing_ranks(procs)
    modules = any(reader.str_or_none(s.get("module")) not in (None, NA_KEY) for p in procs for s in p.sigs.values())
    group_worlds = reader.world_numbers([p.summary() for p in ranked])
    return RunPlan(os.path.abspath(run_dir), dict(sorted(ranks.items())), refs, sum(sizes), max(sizes), found,
                   run_id, modules, {p.meta_path: numbers[p.meta_path] for p in ranked if p.meta_path in numbers},
                   group_worlds if len(group_worlds) > 1 else {}, bucket_rule(procs))


CHUNKS_PER_WORKER = 8   # at least this many seq chunks per worker: smaller tasks, a lower peak, even load


def chunk_size(files: int, per_file: int, limit: int, workers: int, bytes_per_op: int) -> int:
    """Seq values per chunk: its ops (about one per file per seq value, ``bytes_per_op`` each)
    fit the memory a worker has, and there are at least CHUNKS_PER_WORKER chunks per worker."""
    by_memory = max(1, (limit // max(1, workers)) // (bytes_per_op * max(1, files)))
    by_spread = max(1, -(-per_file // (CHUNKS_PER_WORKER * workers)))
    return int(min(by_memory, by_spread, 1 << 30))


def seq_chunk(seq: np.ndarray, size: int) -> np.ndarray:
    """The seq chunk (seq // ``size``) of records' u4 ``seq`` column: divided as uint32, exact
    for these values and half the cost of an int64 division."""
    return np.ascontiguousarray(seq) // np.uint32(size)


def files_by_chunk(indexed) -> list:
    """[(chunk, [(*file, first record, last record)])], by chunk, for every seq chunk the files have
    records in; ``indexed``: (file, its ChunkIndex.of) pairs. A file's range holds the chunk's records
    of every group (a few keys: no numpy)."""
    by_chunk: dict = {}
    for file, index in indexed:
        span: dict = {}
        for c, lo, hi in zip((index[0] & 0xFFFFFFFF).tolist(), index[1].tolist(), index[2].tolist()):
            was = span.setdefault(c, [lo, hi])
            was[0], was[1] = min(was[0], lo), max(was[1], hi)
        for c, (lo, hi) in span.items():
            by_chunk.setdefault(c, []).append((*file, lo, hi))
    return sorted(by_chunk.items())


class ChunkIndex:
    """The index of the ops files a reader reads, built from the pieces it reads (read_process's ``each``: one
    pass): (group << 32 | seq // chunk, first record, last record) per key present in a file."""

    def __init__(self, chunk: int):
        self.chunk, self.runs = chunk, {}

    def each(self, meta: str):
        """read_process's ``each`` for the process of ``meta``: indexes each piece (a piece shown twice counts once)."""
        runs = self.runs.setdefault(meta, [])
        return lambda at, rec: runs.append(chunk_runs(rec["group"], rec["seq"], self.chunk, at))

    def of(self, pt) -> tuple:
        """The index of ``pt``'s ops file as read; a bounded process's: of the records it keeps (ring segments,
        last N) at their places among them."""
        if is_bounded(pt):
            return chunk_runs(pt.records["group"], pt.records["seq"], self.chunk)
        parts = self.runs.pop(pt.meta_path, None)
        return _by_key(*(np.concatenate(c) for c in zip(*parts))) if parts else chunk_runs([], [], 1)


def chunk_runs(group: np.ndarray, seq: np.ndarray, chunk: int, at: int = 0) -> tuple:
    """The ChunkIndex of records given as their group and seq columns (``at``: the first one's position). In call
    order a key's records form a few runs: found in one pass, only their boundaries are reduced per key."""
    if not len(seq):
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    c = seq_chunk(seq, chunk)
    starts = np.flatnonzero(np.concatenate(([True], (c[1:] != c[:-1]) | (group[1:] != group[:-1]))))
    ends = np.append(starts[1:], len(c)) - 1
    return _by_key((group[starts].astype(np.int64) << 32) | c[starts].astype(np.int64), starts + at, ends + at)


def _by_key(run_key: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple:
    keys, inv = np.unique(run_key, return_inverse=True)
    first = np.full(len(keys), np.iinfo(np.int64).max)
    np.minimum.at(first, inv, starts)
    last = np.full(len(keys), -1, np.int64)
    np.maximum.at(last, inv, ends)
    return keys, first, last


@functools.lru_cache(maxsize=4096)
def _meta(path: str, size: int, mtime_ns: int):
    return reader.read_process(path, [], records=False)


def cached_process(path: str):
    """A process's meta lines, read once per worker for all the tasks it runs (keyed by size
    and mtime: a file that changed is read again); None: unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _meta(path, st.st_size, st.st_mtime_ns)


def read_rank(metas: list, refs: dict, issues: list, records: bool = True, ref_of=None,
              world: int | None = None, piece: int = 0, index: ChunkIndex | None = None) -> tuple[list, dict]:
    """The processes of ``metas`` and, per world of ``refs`` (world id -> meta path), its reference
    process: one of ``metas`` if it is one (each file read once), else ``ref_of(path)`` (default: its
    meta lines). ``world``: their world's number, when the run has several (their tables then give
    rank keys and world-named groups: reader.ProcessTrace.world_number); ``piece``: reader.read_process's;
    ``index``: indexes their ops files as they are read (ChunkIndex.of)."""
    procs = [p for p in (reader.read_process(m, issues, records=records, piece=piece, each=index and index.each(m))
                         for m in metas) if p is not None]
    for p in procs:
        p.world_number = world
    own = {p.meta_path: p for p in procs}
    ref_of = ref_of or (lambda m: reader.read_process(m, [], records=False))
    got = {w: own.get(m) or ref_of(m) for w, m in refs.items()}
    return procs, {w: p for w, p in got.items() if p is not None}


def chunk_records(pt, lo: int, hi: int, chunk: int, size: int, ids: tuple | None = None,
                  pairs: PairSeqRuns | None = None) -> np.ndarray:
    """The process's records of one seq chunk (records ``lo``..``hi`` of its ops file), checked as
    reader.read_records checks them (``ids``: its defined sig and group ids, if known); a bounded
    process's as the reader keeps them (ring segments, last N by call time), read whole. ``pairs``: its
    rank task's PairSeqRuns, by whose pair_seqs its p2p ops are cut (trace.p2p_order.chunk_seqs)."""
    if is_bounded(pt):
        rec = reader.read_records(dataclasses.replace(pt, damage=[], lost={}), [])
        return rec[seq_chunk(_cut_seqs(rec, pairs), size) == chunk]
    rec = records.read_slice(pt.ops_path, lo, hi - lo + 1)
    ok = records.valid(rec, *(ids or (records.defined_ids(pt.sigs), records.defined_ids(pt.groups))))
    ok &= seq_chunk(_cut_seqs(rec, pairs), size) == chunk
    return records.last_record_per_op(rec if ok.all() else rec[ok])   # no copy of a slice that is all ours


def _cut_seqs(rec: np.ndarray, pairs: PairSeqRuns | None) -> np.ndarray:
    return rec["seq"] if pairs is None else chunk_seqs(rec["seq"], pairs.pair_seqs(rec)).astype(np.uint32)


def pair_indexed(pt, index: tuple, chunk: int) -> tuple[tuple, PairSeqRuns | None]:
    """(``index``, ChunkIndex.of ``pt``, with each of its sends and recvs also under its pair_seq's chunk;
    ``pt``'s PairSeqRuns), numbered over the whole process from its records (held, or read again a piece
    at a time: only its p2p ones are kept); (``index``, None) when it has no send/recv sig. The rank tasks
    of the report and of check both cut p2p ops this way (partition_map's instances are whole in a chunk)."""
    p2p_sigs = np.array([i for i, s in pt.sigs.items() if s.get("op") in P2P_OPS], np.int64)
    if not len(p2p_sigs):
        return index, None
    parts = [r[np.isin(r["sig"], p2p_sigs)] for r in reader.record_pieces(pt)]
    rec = np.concatenate(parts) if parts else np.empty(0, OP_RECORD)
    pair, runs = pair_seq_runs(pt, rec)
    return with_pair_chunks(index, (rec["group"], rec["seq"], pair), chunk), runs


def with_pair_chunks(index: tuple, p2p: tuple, chunk: int) -> tuple:
    """A ChunkIndex.of ``index`` where each p2p record (``p2p``: group, seq, pair_seq columns) is also found
    under its pair_seq's chunk: that key's range spans the range of its seq's chunk."""
    group, seq, pair = p2p
    cut = seq_chunk(chunk_seqs(seq, pair).astype(np.uint32), chunk)
    moved = cut != seq_chunk(seq, chunk)
    if not moved.any() or not len(index[0]):
        return index
    g = group[moved].astype(np.int64) << 32
    pairs = np.unique(np.stack([g | seq_chunk(seq[moved], chunk).astype(np.int64), g | cut[moved].astype(np.int64)]),
                      axis=1)
    at = np.searchsorted(index[0], pairs[0])
    ok = (at < len(index[0])) & (index[0][np.minimum(at, len(index[0]) - 1)] == pairs[0])
    keys = np.concatenate([index[0], pairs[1][ok]])
    first = np.concatenate([index[1], index[1][at[ok]]])
    last = np.concatenate([index[2], index[2][at[ok]]])
    return _by_key(keys, first, last)
