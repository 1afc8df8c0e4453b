"""One rank's ops as the arrays the per-rank figures need, straight from its records.

``reader.build_frame`` builds ~40 columns per op; the per-rank figures need only
start, end, duration and bytes (``OpArrays``), what the caller waited for (return
time, async, detail, DDP gradient bucket: ``step_table.WaitColumns``) and the
summary cell of each op. Those are gathered here from the records and per-sig /
per-group lookup tables, with the reader's own checks (``read_process``) and
clock alignment (``records.call_times``), so every value equals the frame's."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...trace import reader, records, schema
from ...trace.annotations import BucketRule, sig_is_gradient_allreduce
from ...trace.p2p_order import any_source_senders
from ...trace.rank_ranges import world_group_name
from ..arrays import NA_KEY, OpArrays, narrow, op_times
from ..step_table import WaitColumns
from .bucket_keys import NOTE_KEYS, Numbering, ProcessNotes, small_int_text

CELL_COLUMNS = ("group", "group_desc", "phase", "op", "detail", "module", "mesh_dim")
# --by keys a cell also carries when asked for (analyse's compare_by), after CELL_COLUMNS, as the frame's text
# (reader.build_frame, arrays.column_codes): one value for the ops of a (sig, group) pair of a process (extra_key),
# then those that differ op by op, from each record (RECORD_KEYS: record_codes; a DDP gradient all_reduce's bucket and
# params, numbered over its whole process: bucket_keys).
_SIG_TEXT = ("variant", "region", "dtype", "reduce_op", "device", "thread", "callsite")
RECORD_KEYS = ("status", "source", "end_observed", "iteration", "root") + NOTE_KEYS
CELL_EXTRA_KEYS = _SIG_TEXT + ("shapes", "out_shapes", "bytes", "tag", "async", "group_size", "backend", "world",
                               "host", "rank") + RECORD_KEYS
CELL_KEYS = CELL_COLUMNS + CELL_EXTRA_KEYS      # every --by key the cells group by


@dataclass
class RankOps:
    arrays: OpArrays          # sorted by start (the frame's order for one rank); dur None when ``offsets`` give it
    waits: WaitColumns       # how long the caller waited for each op (return, async, detail, DDP bucket)
    cell: np.ndarray          # per op: index into ``cells``
    cells: list               # per cell: CELL_COLUMNS' strings ("-" for none), then its extra keys' (extra_key)
    op_names: list            # op names in the frame's category order
    proc: np.ndarray          # per op: index into ``stems`` (the trace file it came from)
    stems: list               # trace file stems of the processes with ops
    status: np.ndarray        # per op: its record's status (schema.STATUS_*)
    mkey: np.ndarray | None = None   # per op: index into ``mkeys`` (analysis.modules.ModuleFigures)
    mkeys: list = field(default_factory=list)   # (module, phase) strings ("-" for none)
    offsets: tuple | None = None     # (d_return, d_end): the records' float32 offsets from start (op_times)
    bucket_runs: dict = field(default_factory=dict)   # ops path -> bucket_keys.BucketRuns (--by bucket, params)

    def durations(self, chunk: int) -> np.ndarray:
        """Each op's duration (NaN: unknown): ``arrays.dur``, or op_times' from ``offsets``, ``chunk`` ops at a time."""
        if self.arrays.dur is not None:
            return self.arrays.dur
        (d_return, d_end), t = self.offsets, self.arrays.start
        return op_times_in(d_return, d_end, t, chunk, 3)


def op_times_in(d_return: np.ndarray, d_end: np.ndarray, t: np.ndarray, chunk: int, which: int) -> np.ndarray:
    """op_times' end (``which`` 2) or duration (3), computed ``chunk`` ops at a time (0: at once)."""
    out, chunk = np.empty(len(t), np.float64 if which == 3 else np.int64), chunk or len(t) or 1
    for i in range(0, len(t), chunk):
        out[i:i + chunk] = op_times(d_return[i:i + chunk], d_end[i:i + chunk], t[i:i + chunk])[which]
    return out


def key_str(v) -> str:
    """A meta value as a table key: its text, NA_KEY when none."""
    v = reader.str_or_none(v)
    return NA_KEY if v is None else v


def index_lut(table: dict) -> np.ndarray:
    """id -> position among ``table``'s sorted ids (a meta file's sigs or groups: ids small and dense)."""
    ids = sorted(table)
    lut = np.zeros(max(ids, default=0) + 1, np.int64)
    lut[ids] = np.arange(len(ids))
    return lut


def cell_key(sig: dict, group: dict, dims: dict, worlds: dict) -> tuple:
    """The summary cell (CELL_COLUMNS) of the ops of ``sig`` in ``group`` (``dims``: reader.mesh_dims;
    ``worlds``: world id -> number when the run has several, plan.RunPlan.group_worlds: "w1:0")."""
    world = worlds.get(reader.str_or_none(group.get("world_id"))) if worlds else None
    return (world_group_name(key_str(group.get("name")), world), key_str(group.get("desc")),
            key_str(sig.get("phase")), key_str(sig.get("op")), key_str(sig.get("detail")), key_str(sig.get("module")),
            key_str(reader.mesh_dim_of(group, dims)))


def extra_key(keys: tuple, sig: dict, group: dict, pt, rank: int) -> tuple:
    """The values of ``keys`` (of CELL_EXTRA_KEYS; RECORD_KEYS skipped) for the ops of ``sig`` in ``group`` of
    process ``pt``, rank key ``rank``: the frame's text of each (a number as its int, a missing one NA_KEY)."""
    out = []
    for k in keys:
        if k in RECORD_KEYS:    # the record's: record_cells appends them
            continue
        if k in _SIG_TEXT:
            v = key_str(sig.get(k))
        elif k in ("shapes", "out_shapes"):
            v = reader.shapes_text(sig.get(k))
        elif k == "bytes":
            v = str(_int_or(sig.get(k), 0))
        elif k == "tag":
            v = small_int_text(sig.get(k))
        elif k == "async":
            v = str(bool(sig.get(k)))
        elif k == "group_size":
            v = str(schema.int_or_none(group.get("size")) or 0)
        elif k == "backend":
            v = key_str(group.get("backend"))
        elif k == "world":
            v = key_str(group.get("world_id"))
        elif k == "host":
            v = str(pt.header.get("host"))
        else:
            v = str(rank)
        out.append(v)
    return tuple(out)


class RecordRoots:
    """Each record's root of one process as the frame has it: its sig's, or for a recv from any source the
    rank its ``source`` line names (joined on the raw call time, reader.build_frame); as codes into ``texts``."""

    def __init__(self, pt, slut: np.ndarray):
        sigs = [pt.sigs[i] for i in sorted(pt.sigs)]
        index: dict = {}
        self.of_sig = np.array([index.setdefault(small_int_text(s.get("root")), len(index)) for s in sigs], np.int64)
        src = {t: index.setdefault(str(int(np.int32(r))), len(index))
               for t, r in any_source_senders(pt).items() if r is not None}
        self.texts = list(index)
        self.times = np.array(sorted(src), np.int64)
        self.of_time = np.array([src[t] for t in sorted(src)], np.int64)
        self.slut = slut

    def codes(self, rec: np.ndarray) -> np.ndarray:
        out = self.of_sig.take(self.slut.take(rec["sig"]))
        if len(self.times):
            t = rec["t_call"].astype(np.int64)
            at = np.minimum(np.searchsorted(self.times, t), len(self.times) - 1)
            hit = self.times[at] == t
            out[hit] = self.of_time[at[hit]]
        return out


def record_codes(keys: tuple, rec: np.ndarray, roots: RecordRoots | None = None) -> np.ndarray:
    """Per record an int64 holding its values of ``keys`` (of RECORD_KEYS; 0 for the others): its root's code
    (``roots``) above its iteration (32 bits) above 8 bits of status, source and end_observed (record_text)."""
    code = np.zeros(len(rec), np.int64)
    if "root" in keys:
        code |= roots.codes(rec) << 40
    if "iteration" in keys:
        code |= rec["iteration"].astype(np.int64) << 8
    if "status" in keys:
        code |= reader.STATUS_CODE[rec["status"]].astype(np.int64) << 2
    if "source" in keys:
        code |= (rec["flags"] & schema.FLAG_SOURCE_MASK).clip(0, 1).astype(np.int64) << 1
    if "end_observed" in keys:
        code |= ((rec["flags"] & schema.FLAG_END_OBSERVED) != 0).astype(np.int64)
    return code


def record_text(keys: tuple, code: int, roots: RecordRoots | None = None, note: tuple = (None, None)) -> tuple:
    """The frame's text of each of ``keys`` (RECORD_KEYS, in their order in ``keys``) in a record_codes value
    and a ProcessNotes text (``note``: bucket, params)."""
    it = (code >> 8) & 0xFFFFFFFF
    names = {"iteration": str(it - 2**32 if it >= 2**31 else it), "status": schema.STATUS_NAMES[(code >> 2) & 3],
             "source": list(schema.SOURCE_NAMES.values())[(code >> 1) & 1], "end_observed": str(bool(code & 1)),
             "root": roots.texts[code >> 40] if roots is not None else None,     # iteration: the frame's int32
             "bucket": note[0], "params": note[1]}
    return tuple(names[k] for k in keys)


def record_cells(pair: np.ndarray, codes: np.ndarray, keys: tuple, pair_key, cells: dict,
                 roots: RecordRoots | None = None, notes: tuple | None = None) -> np.ndarray:
    """Per op its cell in ``cells`` (key -> id, grown) from its (sig, group) pair's code, whose key is
    ``pair_key[code]``, and its record_codes value, whose text (``keys``: RECORD_KEYS) ends the cell's key;
    ``notes``: (per op its ProcessNotes code, ProcessNotes.texts) when ``keys`` hold bucket or params."""
    r, r_of = np.unique(codes, return_inverse=True)
    if notes is None:
        texts = [record_text(keys, x, roots) for x in r.tolist()]
    else:       # (record code, note code) pairs present: their texts
        rec_codes, (u, u_of) = r, np.unique(notes[0], return_inverse=True)
        r, r_of = np.unique(r_of.reshape(-1).astype(np.int64) * len(u) + u_of.reshape(-1), return_inverse=True)
        texts = [record_text(keys, int(rec_codes[x // len(u)]), roots, notes[1][int(u[x % len(u)])])
                 for x in r.tolist()]
    joint, cell = np.unique(pair.astype(np.int64) * len(r) + r_of.reshape(-1), return_inverse=True)
    ids = [cells.setdefault(pair_key[j // len(r)] + texts[j % len(r)], len(cells)) for j in joint.tolist()]
    return narrow(np.array(ids, np.int64), len(cells))[cell.reshape(-1)]


def _int_or(v, default: int) -> int:
    x = reader.num_or_nan(v)
    return default if np.isnan(x) else int(x)


def rank_ops(procs: list, refs: dict, rank: int, lean: int = 0, worlds: dict | None = None,
             extra: tuple = (), rule: BucketRule = BucketRule()) -> RankOps | None:
    """The ops of one rank's processes (``procs`` with their records read, held or in pieces: reader.record_pieces;
    it takes them: ``pt.records`` is None after); None when none. ``lean`` (a rank walked in pieces of that
    many ops; 0: whole): its return times, their flags and
    durations (17 B/op) are held as the records' offsets (8 B/op), derived where read. ``worlds``: cell_key's;
    ``extra``: the CELL_EXTRA_KEYS its cells also carry (extra_key); ``rule``: the run's (bucket_keys), read
    when ``extra`` holds bucket or params (then ``bucket_runs`` holds each file's buckets)."""
    cells: dict = {}
    runs: dict = {}
    op_names: list = []
    mkeys: dict = {}
    parts: dict = {k: [] for k in ("t", "dret", "dend", "sig_bytes", "in_place", "grad",
                                   "cell", "proc", "status", "mkey")}
    stems: list = []
    mkey_type = np.int16 if sum(len(pt.sigs) for pt in procs) < 2**15 else np.int64   # few keys: cheaper to scan
    for pt in procs:
        if pt.n_records and (pt.records is not None or pt.pieces):
            _gather(pt, refs, parts, cells, op_names, mkeys, len(stems), mkey_type, lean, worlds, extra, rank,
                    rule, runs)
            stems.append(pt.stem)
        pt.records = None       # gathered: the records (32 B/op) go before the op times are built
    if not parts["t"]:
        return None
    c = {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in parts.items() if v}   # one process: no copy
    t = c["t"]
    if not _ascending(t, lean or len(t)):
        order = np.argsort(t, kind="stable")
        c = {k: v[order] for k, v in c.items()}
        t = c["t"]
    offsets = (c["dret"], c["dend"]) if lean else None
    if lean:        # the end only, a piece at a time
        ret = ret_unknown = dur = None
        end = op_times_in(c["dret"], c["dend"], t, lean, 2)
    else:
        ret, ret_unknown, end, dur = op_times(c["dret"], c["dend"], t)
    a = OpArrays(rank=np.broadcast_to(np.int32(rank), len(t)), start=t, end=end, dur=dur,   # one rank: a view,
                 nbytes=c["sig_bytes"])                                                    # no memory per op
    # what the frame's t_return_ns, async, detail and bucket + phase say (step_table.WaitColumns)
    waits = WaitColumns(a, ret, ret_unknown, c["in_place"], c["grad"], offsets)
    return RankOps(a, waits, c["cell"], list(cells), op_names, c["proc"], stems, c["status"], c["mkey"], list(mkeys),
                   offsets, runs)


def _ascending(t: np.ndarray, step: int) -> bool:
    """Whether ``t`` never decreases, compared ``step`` values at a time (no whole-rank temporary)."""
    return all((p[1:] >= p[:-1]).all() for p in (t[i:i + step + 1] for i in range(0, len(t), step)))


def _gather(pt, refs: dict, parts: dict, cells: dict, op_names: list, mkeys: dict, proc: int, mkey_type,
            lean: int, worlds: dict | None, extra: tuple = (), rank: int = -1, rule: BucketRule = BucketRule(),
            runs: dict | None = None) -> None:
    """Append process ``proc``'s ops to rank_ops' ``parts``, its records read a piece at a time into columns of
    its op count (``lean``: bytes int32 when every value fits, 4 B/op less: their sums are int64 either way, but
    numpy's are slower)."""
    slut, glut = index_lut(pt.sigs), index_lut(pt.groups)
    sigs = [pt.sigs[i] for i in sorted(pt.sigs)]
    groups = [pt.groups[i] for i in sorted(pt.groups)]
    for s in sigs:
        name = reader.str_or_none(s.get("op"))
        if name is not None and name not in op_names:
            op_names.append(name)
    nbytes = np.array([reader.num_or_nan(s.get("bytes")) for s in sigs], np.float64)
    nbytes = np.where(np.isnan(nbytes), 0, nbytes).astype(np.int64)
    nbytes = nbytes.astype(np.int32) if lean and len(nbytes) and np.abs(nbytes).max() < 2**31 else nbytes
    in_place = np.array([not s.get("async") or schema.detail_waits_in_place(s.get("detail")) for s in sigs],
                        bool)   # blocking, or DDP's/Join's own ops
    grad = np.array([sig_is_gradient_allreduce(s) and reader.str_or_none(s.get("phase")) == "backward" for s in sigs])
    mk = np.array([mkeys.setdefault((key_str(s.get("module")), key_str(s.get("phase"))), len(mkeys))
                   for s in sigs], mkey_type)
    per_sig = {"sig_bytes": nbytes, "in_place": in_place, "grad": grad, "mkey": mk}
    wide = np.int32 if len(sigs) * max(len(groups), 1) < 2**31 else np.int64    # 8 B/op less at the task's peak
    slut, glut, n = slut.astype(wide), glut.astype(wide), pt.n_records
    combos = len(sigs) * len(groups)      # (sig, group) pair per op: its cell once the pairs present are known
    combo, present = np.empty(n, narrow(np.empty(0, wide), combos).dtype), np.zeros(combos, bool)
    col = {k: np.empty(n, v.dtype) for k, v in per_sig.items()}
    by_record = tuple(k for k in extra if k in RECORD_KEYS)
    rcode = np.empty(n, np.int64) if by_record else None
    roots = RecordRoots(pt, slut) if "root" in by_record else None
    notes = ProcessNotes(pt, rule) if set(NOTE_KEYS) & set(by_record) else None
    numbering, ncode = (Numbering(pt, notes, slut), np.empty(n, np.int64)) if notes is not None else (None, None)
    col.update(t=np.empty(n, np.int64), status=np.empty(n, np.uint8),
               dret=np.empty(n, schema.OP_RECORD["d_return"]), dend=np.empty(n, schema.OP_RECORD["d_end"]))
    offset, lo = records.clock_offset(pt, refs.get(pt.world_id)), 0
    for rec in reader.record_pieces(pt):
        hi = lo + len(rec)
        si = slut.take(rec["sig"])      # take: up to 3x faster
        code = si * len(groups) + glut.take(rec["group"])
        present |= np.bincount(code, minlength=combos) > 0      # 2.5x faster than present[code] = True
        combo[lo:hi] = code
        for k, v in per_sig.items():
            v.take(si, out=col[k][lo:hi])
        col["t"][lo:hi] = records.aligned(rec["t_call"], offset)
        for k, f in (("status", "status"), ("dret", "d_return"), ("dend", "d_end")):
            col[k][lo:hi] = rec[f]
        if by_record:
            rcode[lo:hi] = record_codes(by_record, rec, roots)
        if notes is not None:       # gradient all_reduces' codes once the whole process is numbered
            ncode[lo:hi] = notes.base.take(si)
            numbering.add(rec, si, lo)
        lo = hi
    if notes is not None:
        at, codes, runs[pt.ops_path] = numbering.done()
        ncode[at] = codes
    dims, pairs = reader.mesh_dims(pt.meshes), np.flatnonzero(present)     # (sig, group) pairs present: few
    keys = {x: cell_key(sigs[x // len(groups)], groups[x % len(groups)], dims, worlds)
            + extra_key(extra, sigs[x // len(groups)], groups[x % len(groups)], pt, rank) for x in pairs.tolist()}
    if by_record:
        parts["cell"].append(record_cells(combo, rcode, by_record, keys, cells, roots,
                                          None if notes is None else (ncode, notes.texts)))
    else:
        c_of = narrow(np.array([cells.setdefault(k, len(cells)) for k in keys.values()], np.int64), len(cells))
        lut = np.zeros(combos, c_of.dtype)
        lut[pairs] = c_of
        parts["cell"].append(lut.take(combo))
    del combo, rcode, ncode
    for k, v in col.items():
        parts[k].append(v)
    parts["proc"].append(np.broadcast_to(np.array(proc, np.int16 if proc < 2**15 else np.int32), n))  # a view


def selected_ops(ops: RankOps | None, selected: np.ndarray) -> RankOps | None:
    """The ops of ``ops`` where ``selected`` (a window), with the same cells and op names, for the
    figures of the ops shown (summary cells, banner facts). ``waits`` is None: compute time counts
    every op of the rank (RankTimes reads the whole rank's waits, the window as ``selected``)."""
    if ops is None or selected.all():
        return ops
    a = ops.arrays
    sub = OpArrays(rank=a.rank[selected], start=a.start[selected], end=a.end[selected],
                   dur=None if a.dur is None else a.dur[selected], nbytes=a.nbytes[selected])
    return RankOps(sub, None, ops.cell[selected], ops.cells, ops.op_names, ops.proc[selected], ops.stems,
                   ops.status[selected], None if ops.mkey is None else ops.mkey[selected], ops.mkeys,
                   None if ops.offsets is None else tuple(x[selected] for x in ops.offsets))
