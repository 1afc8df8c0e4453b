"""Map step 2: one partition of the collectives (a seq chunk of every group) -> its instances'
contribution to skew, stragglers and bandwidth.

An instance is (world, group, seq), for send/recv (world, group, src, dst, tag, pair_seq), as in
``analysis.match``; a chunk holds every instance whose seq (send/recv: pair_seq, from its rank task's
``PairSeqRuns``) lies in it, from every rank, so instances are whole inside one task. The task reads from each ops file only the records between
the first and last of its chunk (``RankPartial.index``), applies the reader's checks and clock
alignment, keeps per instance what match_ops keeps and returns only aggregates: the top instances
by spread, per-rank straggler sums, per-op spreads (a value per instance) and per summary row the
collectives and their T/S sums (analysis.summary)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace import reader, records
from ...trace.annotations import BucketRule
from ...trace.p2p_order import p2p_columns
from ...trace.rank_ranges import rank_key, world_group_name
from ...trace.schema import FLAG_END_OBSERVED, MAX_RANKS, P2P_OPS, STATUS_FAILED, TOTAL_SIZE_OPS
from ..arrays import dense_codes
from ..native_ext import kernels
from ..match import instances_with, untimed_instances
from ..summary import bandwidth_terms, bus_factor, distinct_pairs, pair_sums
from .cpp_layer import cpp_unmatched
from .rank_map import CELL_COLUMNS
from .bucket_keys import NOTE_KEYS, ProcessNotes
from .rank_ops import RECORD_KEYS, RecordRoots, cell_key, extra_key, index_lut, key_str, record_cells, record_codes
from .phase_splits import split_instances
from .plan import cached_process, chunk_records
from .windowing import in_window

TOP_COLUMNS = ["op", "world", "group", "seq", "ranks", "expected", "first_start_ns", "last_start_ns", "first_rank",
               "last_rank", "spread_ns", "slowest_ns", "size_bytes", "end_ns", "p2p"]


@dataclass
class PartitionTask:
    chunk: int                  # seq // chunk_size of this partition
    chunk_size: int
    files: list                 # (meta path, ops path, first record, last record)
    refs: dict                  # world id -> meta path of the reference process
    tables: dict                # table name -> key columns (of CELL_COLUMNS + extra)
    top: int
    window: tuple | None = None  # (rank -> (lo, hi) or None, phases or None): windowing.in_window
    layers: dict = field(default_factory=dict)   # C++ ops path -> cpp_layer.CppFile (its unmatched records)
    worlds: dict = field(default_factory=dict)   # meta path -> world number ({}: one world; plan.RunPlan.worlds)
    group_worlds: dict = field(default_factory=dict)   # world id -> number ({}: one world; plan.RunPlan.group_worlds)
    extra: tuple = ()           # the rank_ops.CELL_EXTRA_KEYS its cells also carry (rank_map.RankTask.extra)
    bucket_rule: BucketRule = BucketRule()       # the run's (plan.RunPlan.bucket_rule): --by bucket, params
    bucket_runs: dict = field(default_factory=dict)   # ops path -> bucket_keys.BucketRuns (its rank task's)
    pair_runs: dict = field(default_factory=dict)     # ops path -> p2p_order.PairSeqRuns (its rank task's)


@dataclass
class PartitionPartial:
    instances: int              # collectives (not p2p) with >= 2 callers
    top: pd.DataFrame           # the ``top`` largest spreads (TOP_COLUMNS)
    stragglers: tuple           # (last ranks, how often each was last, its summed spreads): int64 arrays
    spreads: dict               # op -> spreads of its instances
    bandwidth: dict             # table -> (key tuples, then per key: collectives, T, S, B, observed, untimed)
    busbw: tuple                # (sum S*factor, sum T) over collectives (not p2p), for compare
    split: pd.DataFrame | None = None   # phase_splits.split_instances: instances filed under several phases
    chunk: int = 0              # its task's chunk: the fold sums partitions in this order, not arrival's


@dataclass
class _FileTables:
    """What one process's meta lines say, as a partition task uses it: tabulated once per
    worker for all the partitions it runs (a partition reads a slice of every file)."""
    sig_ids: np.ndarray         # the defined sig / group ids (records.defined_ids)
    group_ids: np.ndarray
    slut: np.ndarray            # sig id -> sig index (sorted ids)
    glut: np.ndarray            # group id -> group index
    op: list                    # per sig index: op name
    p2p: np.ndarray             # per sig: send/recv
    send: np.ndarray
    root: np.ndarray            # per sig: root (the peer of a send/recv), -1 when none
    size: np.ndarray            # per sig: size as the bandwidth counts it
    wg: list                    # per group index: (world id, group name)
    n: np.ndarray               # per group: its size
    cell: list                  # per sig index * groups + group index: the summary cell's key (+ extra keys)
    notes: ProcessNotes | None = None   # its records' bucket and params (_notes: made when first asked)


def _file_tables(pt, worlds: dict, extra: tuple, rank: int) -> _FileTables:
    slut, glut = index_lut(pt.sigs), index_lut(pt.groups)   # no sigs or groups: no record is read
    sigs = [pt.sigs[i] for i in sorted(pt.sigs)]
    groups = [pt.groups[i] for i in sorted(pt.groups)]
    op = [key_str(s.get("op")) for s in sigs]
    nb, ob = _per_sig_int(sigs, "bytes"), _per_sig_int(sigs, "out_bytes")
    tot = np.array([o in TOTAL_SIZE_OPS for o in op], dtype=bool)
    dims = reader.mesh_dims(pt.meshes)
    cell = [cell_key(s, g, dims, worlds) + extra_key(extra, s, g, pt, rank) for s in sigs for g in groups]
    p2p, root = np.array([o in P2P_OPS for o in op], dtype=bool), np.array([_int(s.get("root"), -1) for s in sigs])
    root[p2p & (root < 0)] = MAX_RANKS   # a recv from any source: a p2p instance of its own (no rank is this)
    return _FileTables(records.defined_ids(pt.sigs), records.defined_ids(pt.groups), slut, glut, op,
                       p2p, np.array([o == "send" for o in op], dtype=bool), root.astype(np.int64),
                       np.where(tot, np.maximum(nb, ob), nb),
                       [(key_str(g.get("world_id")), key_str(g.get("name"))) for g in groups],
                       np.array([_int(g.get("size"), 0) for g in groups], np.int64), cell)


_TABLES: dict = {}
_TABLES_KEPT = 4096


def _tables_of(pt, worlds: dict, extra: tuple, world: int | None) -> _FileTables:
    """``pt``'s _FileTables (``worlds``: its run's, cell_key; ``extra``, and ``world``, its world number: its
    cells' extra keys), kept per process object (``_meta`` keeps those per worker; one run's); an entry holds
    its object, so the id it is found by is not reused while it is kept."""
    hit = _TABLES.get(id(pt))
    if hit is not None and hit[0] is pt and hit[1] == (extra, world):
        return hit[2]
    if len(_TABLES) >= _TABLES_KEPT:
        _TABLES.clear()
    ft = _file_tables(pt, worlds, extra, _rank_key(pt, world))
    if ft.slut.nbytes + ft.glut.nbytes <= 1 << 20:   # ids as written: small; odd huge ones are not kept
        _TABLES[id(pt)] = (pt, (extra, world), ft)
    return ft


def _rank_key(pt, world: int | None) -> int:
    """``pt``'s rank as the report keys it (rank_ranges.rank_key), -1 when it has none."""
    return -1 if pt.rank is None else rank_key(world or 0, pt.rank)


def _read_slice(meta, lo, hi, chunk, size, refs, own_refs, worlds, extra, world, pairs=None):
    pt = cached_process(meta)
    if pt is None:
        return None
    ft = _tables_of(pt, worlds, extra, world)
    rec = chunk_records(pt, lo, hi, chunk, size, (ft.sig_ids, ft.group_ids), pairs)
    if not len(rec):
        return None
    wid = pt.world_id
    ref = own_refs.get(wid)
    if ref is None and wid in refs:
        ref = own_refs[wid] = cached_process(refs[wid])
    return pt, rec, records.call_times(pt, ref, rec)


_COLUMNS = {"t": np.int64, "end": np.int64, "dur": np.float64, "rank": np.int64, "seq": np.int64, "wg": np.int64,
            "op": np.int64, "size": np.int64, "n": np.int64, "cell": np.int64, "src": np.int64, "dst": np.int64}


def map_partition(task: PartitionTask) -> PartitionPartial:
    cell_ids: dict = {}
    pair_ids: dict = {}     # with record keys: a (sig, group) pair's key -> id, before record_cells
    by_record = tuple(k for k in task.extra if k in RECORD_KEYS)
    op_ids: dict = {}
    wg_ids: dict = {}
    wg_names: dict = {}     # (world id, group) -> the group as the tables name it, when the run has several worlds
    own_refs: dict = {}
    slices = []
    for meta, ops, lo, hi in task.files:
        world = task.worlds.get(meta)
        got = _read_slice(meta, lo, hi, task.chunk, task.chunk_size, task.refs, own_refs, task.group_worlds,
                          task.extra, world, task.pair_runs.get(ops))
        if got is not None and ops in task.layers:
            got = cpp_unmatched(got, task.layers[ops], task.refs, cached_process)
        key = -1 if got is None else _rank_key(got[0], world)
        if got is not None and task.window is not None:
            keep = in_window(key, *got, *task.window)
            got = (got[0], got[1][keep], got[2][keep]) if keep.any() else None
        if got is not None:
            slices.append((key, world, *got))
    if not slices:
        return _empty(task.chunk)
    total = sum(len(rec) for _, _, _, rec, _ in slices)
    c = {k: np.empty(total, dt) for k, dt in _COLUMNS.items()}   # every file's rows go straight in: no concatenation
    failed, observed = np.empty(total, bool), np.empty(total, bool)
    if task.pair_runs:              # sends/recvs pair by (tag, pair_seq): trace.p2p_order
        c["tag"], c["pair"] = np.zeros(total, np.int64), np.zeros(total, np.int64)
    at = 0
    for i, (key, world, pt, rec, t) in enumerate(slices):
        slices[i] = None                             # the records go as their rows are written
        ft = _tables_of(pt, task.group_worlds, task.extra, world)
        n_groups = len(ft.wg)
        s_op = np.array([op_ids.setdefault(o, len(op_ids)) for o in ft.op], np.int64)
        g_wg = np.array([wg_ids.setdefault(k, len(wg_ids)) for k in ft.wg], np.int64)
        for k in ft.wg if world is not None else ():
            wg_names.setdefault(k, world_group_name(k[1], world))
        si, gi = ft.slut.take(rec["sig"]), ft.glut.take(rec["group"])      # take: ~40 % less than indexing
        c_lut = np.zeros(len(ft.op) * n_groups, np.int64)
        ids = pair_ids if by_record else cell_ids       # by record keys too: the pair's key, then record_cells
        for cmb in np.flatnonzero(np.bincount(si * n_groups + gi, minlength=len(c_lut))).tolist():
            c_lut[cmb] = ids.setdefault(ft.cell[cmb], len(ids))
        _file_columns(c, at, rec, t, si, gi, ft, s_op, g_wg, c_lut, -1 if pt.rank is None else pt.rank)
        if pt.ops_path in task.pair_runs:
            _pair_columns(c, slice(at, at + len(rec)), pt, rec, task.pair_runs[pt.ops_path])
        if by_record:
            rows = slice(at, at + len(rec))
            roots = RecordRoots(pt, ft.slut) if "root" in by_record else None
            c["cell"][rows] = record_cells(c["cell"][rows], record_codes(by_record, rec, roots), by_record,
                                           list(pair_ids), cell_ids, roots, _notes(task, pt, ft, si, rec))
        failed[at:at + len(rec)] = rec["status"] == STATUS_FAILED
        observed[at:at + len(rec)] = (rec["flags"] & FLAG_END_OBSERVED) != 0
        if key != pt.rank and key >= 0:       # a later world's rank: p2p peers (src, dst) stay ranks
            c["rank"][at:at + len(rec)] = key
        at += len(rec)
    del rec, t, si, gi                              # the last file's slice: its rows are written
    ops = [o for o, _ in sorted(op_ids.items(), key=lambda kv: kv[1])]
    inst = _instances(c, task.chunk * task.chunk_size, task.chunk_size)
    k = int(inst.max()) + 1
    first, last, slowest, size, end = _per_instance(inst, k, c)
    del c["src"], c["dst"], c["size"], c["end"]    # each column goes after its last use: a lower peak
    c.pop("tag", None), c.pop("pair", None)
    wgs = [wg for wg, _ in sorted(wg_ids.items(), key=lambda kv: kv[1])]
    world_of = np.asarray([w for w, _ in wgs], dtype=object)
    group_of = np.asarray([wg_names.get((w, g), g) for w, g in wgs], dtype=object)
    op_first = c["op"][first]
    is_p2p = np.isin(np.arange(len(ops)), [i for i, o in enumerate(ops) if o in P2P_OPS])
    p2p = is_p2p[op_first]
    ranks = np.bincount(inst, minlength=k)
    expected = np.where(p2p, 2, c["n"][first])
    del c["op"], c["n"]
    combo, where = np.unique(op_first * (1 << 32) + expected, return_inverse=True)
    fac = np.array([bus_factor(ops[int(x >> 32)], int(x & 0xFFFFFFFF)) for x in combo], np.float64)[where.reshape(-1)]
    del combo, where
    bad = untimed_instances(inst, k, failed, c.pop("dur"), expected)
    terms = bandwidth_terms(slowest, size.astype(np.float64), fac, bad, instances_with(inst, k, observed))
    del fac, bad, failed, observed
    bandwidth = _bandwidth(task, c["cell"], inst, cell_ids, terms)
    coll = np.flatnonzero((~p2p) & (ranks >= 2))
    f_coll, l_coll = first[coll], last[coll]       # only collectives' first and last rows: none at 1 rank
    spread, last_rank = c["t"][l_coll] - c["t"][f_coll], c["rank"][l_coll]
    order = np.lexsort((c["rank"][f_coll], c["t"][f_coll], -spread.astype(np.float64)))
    pick = coll[order[:task.top]]
    f, l = first[pick], last[pick]                 # TOP_COLUMNS: only the few top rows become a frame
    top = pd.DataFrame({"op": op_first[pick], "world": c["wg"][f], "group": c["wg"][f], "seq": c["seq"][f],
                        "ranks": ranks[pick], "expected": expected[pick], "first_start_ns": c["t"][f],
                        "last_start_ns": c["t"][l], "first_rank": c["rank"][f], "last_rank": c["rank"][l],
                        "spread_ns": c["t"][l] - c["t"][f], "slowest_ns": slowest[pick], "size_bytes": size[pick],
                        "end_ns": end[pick], "p2p": p2p[pick]})
    top = top.assign(op=np.asarray(ops, dtype=object)[top["op"].to_numpy()], world=world_of[top["world"].to_numpy()],
                     group=group_of[top["group"].to_numpy()])   # codes -> names (the few rows kept)
    by_last = np.argsort(last_rank, kind="stable")
    last_rank, starts, times = np.unique(last_rank[by_last], return_index=True,
                                         return_counts=True)
    strag = (last_rank, times, np.add.reduceat(spread[by_last], starts) if len(starts) else starts)
    op_coll = op_first[coll]
    by_op = np.argsort(op_coll, kind="stable")          # each op's spreads in instance order
    cut = np.flatnonzero(np.diff(op_coll[by_op])) + 1
    spreads = {ops[int(op_coll[g[0]])]: spread[g].astype(np.float64) for g in np.split(by_op, cut) if len(g)}
    okb = (~p2p) & (terms[0] > 0)     # the collectives bandwidth_terms counts (its T is 0 for the others)
    busbw = (float(terms[2][okb].sum()), float(terms[0][okb].sum()), int(((~p2p)).sum()))
    split = split_instances(c["cell"], cell_ids, inst, first, c["rank"], c["t"],
                            np.asarray(ops, dtype=object)[op_first], group_of[c["wg"][first]], c["seq"][first])
    return PartitionPartial(int(len(coll)), top.reset_index(drop=True), strag, spreads, bandwidth, busbw, split,
                            task.chunk)


def _file_columns(c: dict, at: int, rec: np.ndarray, t: np.ndarray, si: np.ndarray, gi: np.ndarray, ft: _FileTables,
                  s_op: np.ndarray, g_wg: np.ndarray, c_lut: np.ndarray, rank: int) -> None:
    """One file's slice as rows [at, at + len(rec)) of the partition's columns ``c``: aligned
    start, end (known end, else return, else start; never before the start), duration (NaN:
    unknown), rank, seq, (world, group), op, size, group size, summary cell, p2p src and dst."""
    kern = kernels()
    if kern is not None:
        rec = np.ascontiguousarray(rec)
        fields = rec.dtype.fields
        i64 = functools.partial(np.ascontiguousarray, dtype=np.int64)
        kern.file_columns(rec.view(np.uint8).reshape(-1), rec.dtype.itemsize, fields["d_return"][1],
                          fields["d_end"][1], fields["seq"][1], i64(t), i64(si), i64(gi), s_op, i64(ft.size),
                          ft.p2p.view(np.int8), ft.send.view(np.int8), i64(ft.root), g_wg, i64(ft.n), c_lut,
                          len(ft.wg), rank, at, *(c[k] for k in _COLUMNS))
        return
    rows = slice(at, at + len(rec))
    d_end = rec["d_end"].astype(np.float64)
    known = ~np.isnan(d_end)
    d_int = np.where(known, d_end, 0).astype(np.int64)
    d_ret = rec["d_return"].astype(np.float64)
    ret = np.where(np.isnan(d_ret), t, np.where(np.isnan(d_ret), 0, d_ret).astype(np.int64) + t)
    p2p, send, root = ft.p2p[si], ft.send[si], ft.root[si]
    c["t"][rows] = t
    c["end"][rows] = np.maximum(np.where(known, d_int + t, ret), t)
    c["dur"][rows] = np.where(known, d_int.astype(np.float64), np.nan)
    c["rank"][rows] = rank
    c["seq"][rows] = rec["seq"]
    c["wg"][rows] = g_wg[gi]
    c["op"][rows] = s_op[si]
    c["size"][rows] = ft.size[si]
    c["n"][rows] = ft.n[gi]
    c["cell"][rows] = c_lut[si * len(ft.wg) + gi]
    c["src"][rows] = np.where(p2p, np.where(send, rank, root), -1)
    c["dst"][rows] = np.where(p2p, np.where(send, root, rank), -1)


def _pair_columns(c: dict, rows: slice, pt, rec: np.ndarray, runs) -> None:
    """A file's sends and recvs in rows ``rows`` of ``c``: their tag, pair_seq (``runs``: its rank task's
    PairSeqRuns) and the peer of a recv from any source (its ``source`` line; MAX_RANKS: not known)."""
    p = p2p_columns(pt, rec)
    peer = np.where(p.peer >= 0, p.peer, MAX_RANKS)
    rank = c["rank"][rows]
    c["src"][rows] = np.where(p.p2p, np.where(p.send, rank, peer), -1)
    c["dst"][rows] = np.where(p.p2p, np.where(p.send, peer, rank), -1)
    c["tag"][rows] = p.tag
    c["pair"][rows] = runs.pair_seqs(rec)


def _instances(c: dict, seq0: int, size: int) -> np.ndarray:
    """Per op: its instance, numbered from 0 in order of first appearance (analysis.match
    keys: collectives by (world, group, seq), send/recv by (world, group, src, dst, tag, pair_seq);
    the seqs of a partition lie in [seq0, seq0 + size); a send/recv whose pair_seq is not known:
    an instance of its own)."""
    p2p = c["src"] >= 0
    if not p2p.any():       # collectives only (the common case): no masked copies
        return _first_seen_codes(c["wg"] * size + (c["seq"] - seq0))
    inst = np.empty(len(p2p), np.int64)
    coll = ~p2p
    n = 0
    if coll.any():
        inst[coll] = _first_seen_codes(c["wg"][coll] * size + (c["seq"][coll] - seq0))
        n = int(inst[coll].max()) + 1
    if p2p.any():
        keys = pd.DataFrame({k: c[k][p2p] for k in ("wg", "src", "dst")})
        pair = c["pair"][p2p] if "pair" in c else np.zeros(int(p2p.sum()), np.int64)
        keys["tag"] = c["tag"][p2p] if "tag" in c else 0
        keys["pair"] = np.where(pair > 0, pair, -1 - np.arange(len(pair)))     # not known: its own
        inst[p2p] = n + keys.groupby(["wg", "src", "dst", "tag", "pair"], sort=False).ngroup().to_numpy(np.int64)
    return inst


def _per_instance(inst: np.ndarray, k: int, c: dict) -> tuple:
    """Per instance: its first and last caller's rows (_first_and_last), its slowest op's
    duration (NaN: none known), its largest size and its latest end. One kernel pass when
    built, else numpy's ufunc.at."""
    slowest = np.full(k, np.nan)
    size = np.zeros(k, np.int64)
    end = np.full(k, np.iinfo(np.int64).min, np.int64)
    kern = kernels()
    if kern is not None:
        first, last = np.empty(k, np.int64), np.empty(k, np.int64)
        i64 = functools.partial(np.ascontiguousarray, dtype=np.int64)
        kern.instance_extremes(i64(inst), i64(c["t"]), i64(c["rank"]), np.ascontiguousarray(c["dur"], np.float64),
                               i64(c["size"]), i64(c["end"]), first, last, slowest, size, end)
        return first, last, slowest, size, end
    first, last = _first_and_last(inst, k, c["t"], c["rank"])
    np.fmax.at(slowest, inst, c["dur"])
    np.maximum.at(size, inst, c["size"])
    np.maximum.at(end, inst, c["end"])
    return first, last, slowest, size, end


def _first_seen_codes(keys: np.ndarray) -> np.ndarray:
    """pd.factorize's codes (distinct keys numbered in order of first appearance) for keys
    in a small range: one kernel pass over a table of the range when built (and the range is
    at most a few times the keys), else distinct keys by a bincount table, no hashing."""
    kern = kernels()
    if kern is not None and len(keys):
        lo, span = int(keys.min()), int(keys.max()) - int(keys.min()) + 1
        if span <= max(4 * len(keys), 1 << 20):
            out = np.empty(len(keys), np.int64)
            kern.first_seen_codes(np.ascontiguousarray(keys, dtype=np.int64), lo, span, out)
            return out
    distinct, code = dense_codes(keys)                 # codes in key order
    code = code.astype(np.int64)
    first = np.full(len(distinct), len(keys), np.int64)
    np.minimum.at(first, code, np.arange(len(keys)))    # each key's first row
    renumber = np.empty(len(distinct), np.int64)
    renumber[np.argsort(first)] = np.arange(len(distinct))
    return renumber[code]


def _first_and_last(inst: np.ndarray, k: int, t: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per instance the row of its first caller (earliest start, then lowest rank: the
    frame's row order) and of its last (latest start, then highest rank), without a sort."""
    out = []
    for pick, init in ((np.minimum, np.iinfo(np.int64).max), (np.maximum, np.iinfo(np.int64).min)):
        best_t = np.full(k, init, np.int64)
        pick.at(best_t, inst, t)
        tied = np.flatnonzero(t == best_t[inst])
        best_r = np.full(k, init, np.int64)
        pick.at(best_r, inst[tied], rank[tied])
        rows = tied[rank[tied] == best_r[inst[tied]]]
        row = np.zeros(k, np.int64)
        row[inst[rows]] = rows
        out.append(row)
    return out[0], out[1]


def _bandwidth(task, cell, inst, cell_ids, terms) -> dict:
    """Per summary table: (key tuples, collectives, then each of ``terms`` (bandwidth_terms): T, S, B,
    observed, untimed) summed over the distinct (row, instance) pairs (every row an instance has an
    op in counts it once)."""
    k = len(terms[0])
    head = np.zeros(k, np.int64)
    head[inst[::-1]] = cell[::-1]                # each instance's first op's cell (the first one written)
    other = np.flatnonzero(cell != head[inst])   # ops filed under another cell than that (few): the
    o_cell, o_inst = cell[other], inst[other]    # only ops each table has to look at one by one
    out, done = {}, {}
    for name, by in task.tables.items():
        if tuple(by) in done:                    # e.g. by_phase and phase+op: the same keys
            out[name] = done[tuple(by)]
            continue
        pos = [(CELL_COLUMNS + task.extra).index(c) for c in by]
        rows: dict = {}                          # a few cells: plain dicts, no pandas per partition
        rowkey = np.array([rows.setdefault(tuple(key[i] for i in pos), len(rows)) for key in cell_ids], np.int64)
        pg, pi = distinct_pairs(rowkey[head], rowkey[o_cell], o_inst)
        out[name] = done[tuple(by)] = (list(rows), *pair_sums(pg, pi, len(rows), terms))
    return out


def _notes(task: PartitionTask, pt, ft: _FileTables, si: np.ndarray, rec: np.ndarray) -> tuple | None:
    """(per record its ProcessNotes code, their texts) when the task's cells carry bucket or params: a gradient
    all_reduce's bucket from its rank task's numbering (bucket_runs)."""
    if not set(NOTE_KEYS) & set(task.extra):
        return None
    if ft.notes is None:
        ft.notes = ProcessNotes(pt, task.bucket_rule)
    runs = task.bucket_runs.get(pt.ops_path)
    bucket = runs.buckets(rec["group"], rec["seq"]) if runs is not None else np.full(len(rec), -1, np.int64)
    return ft.notes.codes(si, rec["iteration"], bucket), ft.notes.texts


def _per_sig_int(sigs: list, name: str) -> np.ndarray:
    """A numeric sig field as the frame has it (``reader.build_frame``: missing -> 0)."""
    v = np.array([reader.num_or_nan(s.get(name)) for s in sigs], dtype=np.float64)
    return np.where(np.isnan(v), 0, v).astype(np.int64)


def _int(v, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _empty(chunk: int) -> PartitionPartial:
    empty = np.zeros(0, np.int64)
    return PartitionPartial(0, pd.DataFrame(columns=TOP_COLUMNS), (empty,) * 3, {}, {}, (0.0, 0.0, 0), chunk=chunk)
