"""Read a run directory into one pandas DataFrame (one row per op per rank).

Trace files are untrusted input: JSON only (no pickle, no eval), every field
type-checked before use, and any damage (torn record, corrupt line, unknown
version, missing ranks) becomes a ``TraceIssue`` instead of an exception. Only
"nothing usable at all" raises ``CommtraceError`` (exit code 2 in the CLI).
"""
from __future__ import annotations

import glob
import json
import os
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import CommtraceError
from . import coverage as bounded
from . import schema
from .clocks import fit as fit_clock
from .group_ranks import ranks_text
from .schema import int_or_none, list_or_empty
from .records import (call_times, clock_offset, defined, defined_ids, last_record_per_op, member, read_pieces, sane,
                      valid)
from . import marks as mark_tables
from .annotations import assign_buckets, bucket_rule, process_buckets
from .p2p_order import process_pair_seqs
from .issues import (  # noqa: F401  (TraceIssue and its kinds: read here, imported from here too)
    ABRUPT, COVERAGE, DAMAGED, OTHER_RUN, RANKS_MISSING, TRUNCATED, UNUSABLE, TraceIssue)
from .rank_ranges import fmt_ranks, rank_key

DEFAULT_BASE = "commtrace-out"

# Sig fields that become categorical string columns / numeric columns.
_SIG_STR = ("op", "variant", "dtype", "reduce_op", "thread", "device", "phase", "detail", "module",
            "callsite", "region", "params", "api")
_SIG_NUM = ("bytes", "out_bytes", "root", "tag", "bucket")


# A record's status byte -> the status it is read as (unknown values: in flight), for the frame and the cells.
STATUS_CODE = np.full(256, schema.STATUS_IN_FLIGHT, dtype=np.int8)
STATUS_CODE[sorted(schema.STATUS_NAMES)] = sorted(schema.STATUS_NAMES)


class CommtraceWarning(UserWarning):
    pass


@dataclass
class ProcessTrace:
    """What one process wrote: meta lines sorted by type, plus its records."""
    stem: str
    meta_path: str
    ops_path: str
    header: dict = field(default_factory=dict)
    sigs: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)
    worlds: list = field(default_factory=list)
    clocks: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    sources: list = field(default_factory=list)  # "source" lines: the senders of recvs from any source
    marks: list = field(default_factory=list)
    labels: dict = field(default_factory=dict)   # "label" lines: id -> text (span records refer to them)
    dumps: list = field(default_factory=list)
    ddp: list = field(default_factory=list)
    meshes: list = field(default_factory=list)   # "mesh" meta lines (DeviceMesh dimensions)
    exception: dict | None = None
    end: dict | None = None
    clock: dict | None = None  # trace.clocks.ProcessClock.describe(), set by load_run
    process: dict = field(default_factory=dict)  # "process" lines (spawn_index, ...)
    records: np.ndarray | None = None
    n_records: int = 0
    # When ``records`` is a slice of the process's (a seq chunk's): the p2p_order.PairSeqRuns of all of them,
    # which its sends and recvs take their pair_seq from (a slice alone cannot number them).
    pair_runs: object = None
    # Read in pieces (read_process's ``piece``; record_pieces reads them): (records on disk, records per piece),
    # and its last op call (monotonic ns; the clock fit's).
    pieces: tuple | None = None
    last_call_ns: int | None = None
    complete: bool = True
    lost: dict = field(default_factory=dict)  # group name ("?" if unknown) -> [first seq, last seq, records]
    n_lost: int = 0                           # records that could not be read
    damage: list = field(default_factory=list)  # what is damaged, one phrase each (meta file, ops file)
    # The same phrases with this process's file names written "*.meta.jsonl", "*.ops.bin": equal for
    # processes damaged alike (check folds their findings into one).
    damage_any: list = field(default_factory=list)
    meta_damage: list = field(default_factory=list)  # the phrases of ``damage`` about its meta file
    cut: bool = False      # a file of it ends mid-line or mid-record (killed mid-write, or a full disk)
    coverage: dict | None = None  # bounded mode: what the files cover (trace.coverage.describe)
    # Its world's number among the run's several (number_worlds), set by the report: its tables and
    # summary then give its rank as a rank key (rank_ranges.rank_key); None (one world): the rank.
    world_number: int | None = None

    @property
    def world_id(self):
        """The id of the world this process was a rank of (None: it wrote none)."""
        return next((w.get("world_id") for w in self.worlds), None)

    @property
    def rank(self) -> int | None:
        r = self.header.get("rank")
        if isinstance(r, int):
            return r
        for w in self.worlds:
            if isinstance(w.get("rank"), int):
                return w["rank"]
        return None

    def summary(self) -> dict:
        return {
            "file": os.path.basename(self.meta_path), "rank": None if self.rank is None else _rank_or_minus1(self),
            "pid": self.header.get("pid"),
            "run_id": self.header.get("run_id") if isinstance(self.header.get("run_id"), str) else None,
            "host": self.header.get("host"), "source": self.header.get("source", "python"),
            "launcher": self.header.get("launcher"), "command": self.header.get("command"),
            "argv": self.header.get("argv"),
            "torch_version": self.header.get("torch_version"), "backends": sorted({str(g.get("backend")) for g in self.groups.values()}),
            "world_size": next((w.get("world_size") for w in self.worlds), None),
            # the ids of the worlds it was a rank of, in order (a world: one init_process_group's ranks)
            "worlds": [str(w["world_id"]) for w in self.worlds if w.get("world_id") is not None],
            "world_ranks": [int_or_none(w.get("rank")) for w in self.worlds if w.get("world_id") is not None],
            "world_created_wall_ns": [world_created_wall_ns(self.header, w) for w in self.worlds
                                      if w.get("world_id") is not None],
            "t_wall_ns": self.header.get("t_wall_ns"), "t_mono_ns": self.header.get("t_mono_ns"),
            "end": self.end, "exception": self.exception, "complete": self.complete,
            "records": self.n_records, "ppid": self.header.get("ppid"),
            "launch_env": self.header.get("launch_env") if isinstance(self.header.get("launch_env"), dict) else {},
            "spawn_index": int_or_none(self.process.get("spawn_index")),
            "untraced_backends": [b for b in list_or_empty(self.process.get("untraced_backends")) if isinstance(b, str)],
            "lost_records": self.n_lost, "lost": self.lost, "damage": list(self.damage),
            "damage_any": list(self.damage_any), "meta_damage": list(self.meta_damage), "cut": self.cut,
            "dumps": self.dumps, "marks": self.marks, "clock": self.clock, "coverage": self.coverage,
        }


def newest_run(base: str = DEFAULT_BASE) -> str:
    if not os.path.isdir(base):
        raise CommtraceError(f"{base}: no runs here (give a run directory, or trace one with `commtrace run`)")
    runs = [os.path.join(base, d) for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))]
    if not runs:
        raise CommtraceError(f"{base}: no runs here")
    return max(runs, key=os.path.getmtime)


def find_traces(run_dir: str) -> list[str]:
    if not os.path.exists(run_dir):
        raise CommtraceError(f"{run_dir}: no such directory")
    if not os.path.isdir(run_dir):
        raise CommtraceError(f"{run_dir}: not a directory")
    metas = sorted(glob.glob(os.path.join(glob.escape(run_dir), "*" + schema.META_SUFFIX)))
    if not metas:
        runs = runs_in(run_dir)
        if runs:    # e.g. ./commtrace-out itself: point at the runs in it
            shown = ", ".join(runs[:RUNS_LISTED]) + (f", and {len(runs) - RUNS_LISTED} more" if len(runs) > RUNS_LISTED else "")
            raise CommtraceError(f"{run_dir}: a folder of {len(runs)} run{'s' if len(runs) > 1 else ''}, "
                                 f"not a run; give one of them (newest first): {shown}")
        raise CommtraceError(f"{run_dir}: no trace files (*{schema.META_SUFFIX})")
    # A FIFO or device among the files would block the first read forever (a dangling link would not).
    odd = [e.name for e in os.scandir(run_dir) if not e.is_dir() and not e.is_file() and os.path.exists(e.path)]
    if odd:
        raise CommtraceError(f"{os.path.join(run_dir, odd[0])}: not a regular file (a FIFO, socket or "
                             f"device); a run directory holds only files commtrace wrote")
    return metas


# Runs named in the error for a folder of runs (newest first); then how many more.
RUNS_LISTED = 5


def runs_in(folder: str) -> list[str]:
    """The run directories directly inside ``folder`` (those with trace files), newest first."""
    try:
        subdirs = [e.path for e in os.scandir(folder) if e.is_dir()]
    except OSError:
        return []
    runs = [d for d in subdirs if glob.glob(os.path.join(glob.escape(d), "*" + schema.META_SUFFIX))]
    return sorted(runs, key=os.path.getmtime, reverse=True)


def read_process(meta_path: str, issues: list[TraceIssue], records: bool = True, piece: int = 0,
                 each=None) -> ProcessTrace | None:
    """One process's meta file, and its op records unless ``records`` is False (meta lines only);
    ``piece`` > 0: checked ``piece`` records at a time, held only where read_records says (``each``: its)."""
    stem = os.path.basename(meta_path)[: -len(schema.META_SUFFIX)]
    pt = ProcessTrace(stem, meta_path, meta_path[: -len(schema.META_SUFFIX)] + schema.OPS_SUFFIX)
    name = os.path.basename(meta_path)
    try:
        with open(meta_path, "rb") as f:
            raw = f.read()
    except OSError as e:
        issues.append(TraceIssue(name, f"unreadable: {e.strerror}", kind=UNUSABLE))
        return None
    lines = raw.split(b"\n")
    bad = torn = wrong = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            if i == len(lines) - 1:   # no newline after it (blank lines were skipped)
                torn = len(line)
                continue
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("type"), str):   # a line of another type: damage
            wrong += schema.conform(obj)
            _take_meta(pt, obj)
        else:
            bad += 1
    # Every line is written whole in one write(): a torn last line means the
    # file was cut (truncated, disk full), not that the process died mid-write.
    if torn:
        pt.complete, pt.cut = False, True
        _damaged(pt, issues, name, "{} truncated mid-line",
                 f"truncated mid-line (the last {torn} bytes are not a whole line)")
    if bad:
        _damaged(pt, issues, name, f"{{}} has {bad} corrupt line(s)",
                 f"{bad} corrupt metadata line(s) skipped")
    if wrong:
        _damaged(pt, issues, name, f"{{}} has {wrong} field(s) of the wrong type or range",
                 f"{wrong} metadata field(s) of the wrong type or range ignored")
    if pt.header.get("format") != schema.FORMAT_NAME:
        issues.append(TraceIssue(name, "not a commtrace trace (no header line)", kind=UNUSABLE))
        return None
    version = pt.header.get("version")
    if not isinstance(version, int) or version > schema.FORMAT_VERSION or version < 1:
        issues.append(TraceIssue(name, f"unknown format version {version!r} (this commtrace reads "
                                       f"{schema.FORMAT_VERSION})", pt.rank, UNUSABLE))
        return None
    if not records:
        return pt
    pt.records = read_records(pt, issues, piece, each)
    opts = bounded.options(pt.header)
    if opts is not None:
        doc, problem = bounded.read_coverage(meta_path)
        if problem:
            issues.append(TraceIssue(os.path.basename(bounded.coverage_path(meta_path)), problem, pt.rank, COVERAGE))
        pt.coverage = bounded.describe(opts, doc, pt.groups, pt.records)
    if pt.end is None:
        pt.complete = False
        if pt.rank is not None:  # rank-less processes: see Run.unranked
            issues.append(TraceIssue(name, "trace ends abruptly (no end record: still running, killed, or crashed)",
                                     pt.rank, ABRUPT))
    return pt


def _damaged(pt: ProcessTrace, issues: list, file: str, phrase: str, problem: str,
             kind: str = DAMAGED) -> None:
    """Damage to ``file`` (one of ``pt``'s): ``phrase`` ("{}" where the file name goes) in ``pt.damage``,
    in ``pt.damage_any`` with the file's stem written "*"; ``problem`` in ``issues``."""
    pt.damage.append(phrase.format(file))
    if file == os.path.basename(pt.meta_path):
        pt.meta_damage.append(pt.damage[-1])
    pt.damage_any.append(phrase.format("*" + file[len(pt.stem):] if file.startswith(pt.stem + ".") else file))
    issues.append(TraceIssue(file, problem, pt.rank, kind))


# Writers number sigs and groups densely from 0 and the frame is built with
# lookup arrays indexed by id: an id beyond these (a corrupt or hostile line)
# is ignored rather than allocating memory for it. Groups: the record's uint16.
_MAX_SIG_ID = 1 << 24
_MAX_GROUP_ID = 1 << 16


def _id_below(v, limit: int) -> bool:
    return int_or_none(v) is not None and 0 <= v < limit


# Meta line types appended whole to a ProcessTrace list (the others: _take_meta).
_LISTED = {schema.META_WORLD: "worlds", schema.META_ERROR: "errors", schema.META_SOURCE: "sources",
           schema.META_MARK: "marks",
           schema.META_DUMP: "dumps", schema.META_DDP_MODULE: "ddp", schema.META_DDP_BUCKETS: "ddp"}


def _take_meta(pt: ProcessTrace, obj: dict) -> None:
    t = obj.get("type")
    if t in _LISTED:
        getattr(pt, _LISTED[t]).append(obj)
    elif t == schema.META_HEADER:
        # A process writes a second header once it has a rank: later values win.
        pt.header = {**pt.header, **{k: v for k, v in obj.items() if v is not None}} if pt.header else obj
    elif t == schema.META_PROCESS:
        pt.process.update((k, v) for k, v in obj.items() if k != "type")
    elif t == schema.META_SIG and _id_below(obj.get("id"), _MAX_SIG_ID) and isinstance(obj.get("op"), str):
        pt.sigs[obj["id"]] = obj
    elif t == schema.META_GROUP and _id_below(obj.get("id"), _MAX_GROUP_ID):
        pt.groups[obj["id"]] = obj
    elif t == schema.META_CLOCK:
        if isinstance(obj.get("offset_ns"), int) and isinstance(obj.get("t_mono_ns"), int):
            pt.clocks.append(obj)
    elif t == schema.META_LABEL and int_or_none(obj.get("id")) is not None:
        pt.labels[obj["id"]] = str(obj.get("text"))
    elif t == schema.META_EXCEPTION:
        pt.exception = obj
    elif t == schema.META_END:
        pt.end = obj
    elif t == schema.META_MESH and isinstance(obj.get("dims"), list):
        pt.meshes.append(obj)


def read_records(pt: ProcessTrace, issues: list[TraceIssue], piece: int = 0, each=None) -> np.ndarray | None:
    """The process's records, checked (damage noted, unreadable ones left out), de-duplicated, a ring's last
    N kept; sets ``n_records``. ``piece`` > 0 and a plain ops file (not a ring's, not the C++ layer's, whose
    readers take them whole) with every record final: checked ``piece`` records at a time and None returned
    (``pt.pieces``: record_pieces reads them again); else read as one piece. ``each(first, records)``, if
    given, sees every piece of the ops file as read, unchecked (``first``: its first record's place in the
    file; a ring's older segment is not shown): what a caller takes of every record costs no second read.
    A file read again as one piece (a record not final) is shown again whole."""
    name = os.path.basename(pt.ops_path)
    plain = piece and bounded.options(pt.header) is None and pt.header.get("source") != "cpp" and \
        bounded.segment_paths(pt.ops_path) == [pt.ops_path] and os.path.exists(pt.ops_path)
    size = os.path.getsize(pt.ops_path) if os.path.exists(pt.ops_path) else 0
    whole = None if plain else _segments(pt, pt.ops_path, schema.OP_RECORD, schema.RECORD_SIZE, issues)
    if not plain and whole is None:
        if pt.groups or pt.sigs:  # a process that never made a process group has no ops file
            _damaged(pt, issues, name, "{} missing", "ops file missing")
        pt.n_records = 0
        return np.empty(0, dtype=schema.OP_RECORD)
    sig_ids, group_ids = defined_ids(pt.sigs), defined_ids(pt.groups)
    lost, undefined, total, last = [], 0, 0, None
    for at, rec in read_pieces(pt.ops_path, size // schema.RECORD_SIZE, piece) if plain else [(0, whole)]:
        if each is not None:
            each(at, rec if plain else rec[max(0, len(rec) - size // schema.RECORD_SIZE):])
        ok = defined(rec, sig_ids, group_ids)
        undefined += int((~ok).sum())
        ok &= sane(rec)
        if plain and (rec["status"][ok] != schema.STATUS_COMPLETED).any():
            return read_records(pt, issues, each=each)     # de-duplication (last_record_per_op) needs them all
        total += len(rec)
        lost += [] if ok.all() else [rec[~ok]]
        whole = rec if ok.all() else rec[ok]
        last = max(last or 0, int(whole["t_call"].max())) if len(whole) else last
    if plain and size % schema.RECORD_SIZE:
        _torn(pt, issues, [(name, size % schema.RECORD_SIZE)])
    if lost:
        lost = lost[0] if len(lost) == 1 else np.concatenate(lost)
        _note_lost(pt, lost)
        # The meta lines of a flush are written before its records: records that name
        # undefined sigs/groups mean the meta file lost lines -- if it is damaged;
        # otherwise the records themselves are.
        cause = (f"{undefined} refer to sig/group definitions missing from {os.path.basename(pt.meta_path)}"
                 if undefined and pt.meta_damage else "corrupt")
        _damaged(pt, issues, name, f"{len(lost)} of {total} op records in {{}} unreadable",
                 f"{len(lost)} of {total} op record(s) unreadable ({cause}); skipped")
    if plain:
        pt.pieces, pt.last_call_ns, pt.n_records = (size // schema.RECORD_SIZE, piece), last, total - len(lost)
        return None
    whole = bounded.keep_last_records(last_record_per_op(whole), (bounded.options(pt.header) or {}).get("keep_last"))
    pt.n_records = len(whole)
    return whole


def record_pieces(pt: ProcessTrace):
    """The process's records in file order: ``pt.records`` as one piece when held, else the pieces read_records
    checked, each piece's readable records (none when it read none; all, unchecked, when it found none lost)."""
    if pt.records is not None:
        yield pt.records
        return
    ids = defined_ids(pt.sigs), defined_ids(pt.groups)
    for _, rec in read_pieces(pt.ops_path, *(pt.pieces or (0, 1))):
        ok = valid(rec, *ids) if pt.n_lost else None
        yield rec if ok is None or ok.all() else rec[ok]


def _segments(pt: ProcessTrace, path: str, dtype, size: int, issues: list[TraceIssue]) -> np.ndarray | None:
    """The records of ``path`` (bounded mode: the ring's previous segment ``<path>.1`` first;
    None: no file), noting each segment cut mid-record."""
    rec, torn = bounded.read_segments(path, dtype, size)
    _torn(pt, issues, torn)
    return rec


def _torn(pt: ProcessTrace, issues: list[TraceIssue], torn: list) -> None:
    for part, extra in torn:
        pt.complete, pt.cut = False, True
        _damaged(pt, issues, part, "{} truncated mid-record",
                 f"truncated mid-record ({extra} trailing bytes ignored)", TRUNCATED)


def read_spans(pt: ProcessTrace, issues: list[TraceIssue]) -> np.ndarray:
    """The process's compute span records (none when it wrote no spans file)."""
    path = pt.meta_path[: -len(schema.META_SUFFIX)] + schema.SPANS_SUFFIX
    name = os.path.basename(path)
    rec = _segments(pt, path, schema.SPAN_RECORD, schema.SPAN_RECORD_SIZE, issues)
    if rec is None:
        return np.empty(0, dtype=schema.SPAN_RECORD)
    ok = (rec["phase"] < len(schema.SPAN_PHASES)) & (rec["t_end"] >= rec["t_begin"]) & (rec["t_begin"] > 0)
    if not ok.all():
        bad = int((~ok).sum())
        _damaged(pt, issues, name, f"{bad} of {len(rec)} span records in {{}} unreadable",
                 f"{bad} of {len(rec)} compute span record(s) unreadable; skipped")
        rec = rec[ok]
    return bounded.spans_covered(rec, pt.coverage)


def _note_lost(pt: ProcessTrace, bad: np.ndarray) -> None:
    """Where unreadable records were, group name ("?": undefined) -> [first seq, last seq, count]:
    diagnoses must not take a lost record for an op that never happened."""
    pt.n_lost += len(bad)
    for gid in np.unique(bad["group"]):
        g = pt.groups.get(int(gid))
        key = str_or_none(g.get("name")) if isinstance(g, dict) and g.get("name") is not None else "?"
        seqs = bad["seq"][bad["group"] == gid]
        lo, hi, cnt = pt.lost.get(key, (int(seqs.min()), int(seqs.max()), 0))
        pt.lost[key] = [min(lo, int(seqs.min())), max(hi, int(seqs.max())), cnt + len(seqs)]


# -- clocks -----------------------------------------------------------------------

def describe_clocks(procs: list[ProcessTrace], refs: dict | None = None) -> None:
    """Set each process's ``clock``: how its times were aligned and how well. ``refs``: world
    id -> its rank-0 process (default: found among ``procs``; one rank's files need them given)."""
    refs = reference_processes(procs) if refs is None else refs
    for pt in procs:
        twin = python_twin(pt, procs)  # the C++ layer shares its process's clock
        clock = fit_clock(twin, refs.get(twin.world_id), twin.world_id)
        pt.clock = clock.describe()
        start = int_or_none(pt.header.get("t_mono_ns"))
        # The process's start on rank 0's clock (its wall time up to its last op, when
        # it wrote no end record, is measured against aligned op times).
        pt.clock["start_aligned_ns"] = None if start is None else start + int(clock.offset([start])[0])


# -- frame ------------------------------------------------------------------------

def shapes_text(v) -> str:
    """A sig's shapes as the frame's ``shapes`` / ``out_shapes`` text ("" when none)."""
    return json.dumps(v, separators=(",", ":")) if isinstance(v, list) else ""


def str_or_none(v):
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def num_or_nan(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan


def _categorical(values: list, codes: np.ndarray) -> pd.Categorical:
    """Categorical of ``values[codes]`` from codes (no per-row objects); the lookup has the codes
    type pandas would pick, so the take is the final codes array, not copied again."""
    cats = pd.Index(values).unique().dropna()
    small = np.int8 if len(cats) < 127 else np.int16 if len(cats) < 32767 else np.int32
    lookup = pd.Categorical(values, categories=cats).codes.astype(small)
    if not len(lookup):
        return pd.Categorical.from_codes(np.full(len(codes), -1, dtype=np.int8), categories=cats)
    return pd.Categorical.from_codes(lookup[codes], categories=cats, validate=False)


def _lut(ids, base: int) -> np.ndarray:
    """Array mapping a file's local ids to global row indices (-1 = undefined)."""
    ids = np.fromiter(ids, dtype=np.int64)
    lut = np.full(int(ids.max()) + 1 if len(ids) else 1, -1, dtype=np.int32)
    lut[ids] = np.arange(base, base + len(ids))
    return lut


def build_frame(procs: list[ProcessTrace], refs: dict | None = None, world_ranks: bool = False) -> pd.DataFrame:
    """One row per op per rank, times on rank 0's clock, sorted by start time. Records are permuted
    into time order once, then each column taken from per-sig / per-group / per-process tables
    (categoricals by code): the frame is materialized once. ``refs``: world id -> its reference
    process (default: the rank-0 process of each world among ``procs``). ``world_ranks``: a row's
    rank is its process's rank in the row's world (``rank_in_world``), else its process's rank
    (rank key: ``world_number``), as the report keys a process that made several worlds. Bucket and params
    follow ``procs``' annotations.bucket_rule, as the analysis cells do."""
    rule = bucket_rule(procs)       # from the meta lines, as the plan's: not from the rows read
    sig_rows: list[dict] = []
    group_rows: list[dict] = []
    group_meshes: list[dict] = []   # per group row: its process's group name -> mesh dimension
    group_rank: list[int] = []      # per group row: its process's rank (world_ranks: in the group's world)
    refs = reference_processes(procs) if refs is None else refs
    parts: dict[str, list] = {k: [] for k in ("proc", "sig", "grp", "t", "traw", "dret", "dend", "seq", "it", "st", "fl",
                                              "bucket", "pair")}
    for pi, pt in enumerate(procs):
        rec = pt.records
        if rec is None or len(rec) == 0:
            continue
        slut = _lut(pt.sigs, len(sig_rows))
        sig_rows.extend(pt.sigs.values())
        glut = _lut(pt.groups, len(group_rows))
        group_rows.extend(pt.groups.values())
        dims = mesh_dims(pt.meshes)
        group_meshes.extend(dims for _ in pt.groups)
        group_rank.extend(rank_in_world(pt, g.get("world_id")) if world_ranks else _rank_or_minus1(pt)
                          for g in pt.groups.values())
        clock_pt = python_twin(pt, procs)  # the C++ layer shares its process's clock
        aligned = call_times(clock_pt, refs.get(clock_pt.world_id), rec)
        parts["proc"].append(np.full(len(rec), pi, dtype=np.int32))
        parts["sig"].append(slut[rec["sig"]])
        parts["grp"].append(glut[rec["group"]])
        parts["t"].append(aligned)
        parts["bucket"].append(process_buckets(rec["t_call"], rec["sig"], rec["iteration"], pt.sigs))
        pair = process_pair_seqs(pt, rec) if pt.pair_runs is None else pt.pair_runs.pair_seqs(rec)
        parts["pair"].append(pair.astype(np.uint32))
        for k, f in (("traw", "t_call"), ("dret", "d_return"), ("dend", "d_end"), ("seq", "seq"),
                     ("it", "iteration"), ("st", "status"), ("fl", "flags")):
            parts[k].append(rec[f])
        pt.records = None  # the frame holds it from here on (summary() keeps the count)
    if not parts["t"]:
        return empty_frame()
    rank_of_grp = np.array(group_rank, dtype=np.int32)
    proc = np.concatenate(parts.pop("proc"))
    t = np.concatenate(parts.pop("t"))
    grp = np.concatenate(parts.pop("grp"))
    order = np.lexsort((rank_of_grp[grp], t))  # by start time, then rank (stable)
    proc, t, grp_codes = proc[order], t[order], grp[order]
    del grp
    # One column at a time, releasing each part as it is used (the parts are views
    # of the record arrays, which go away with the last of them).
    c = {k: np.concatenate(parts.pop(k))[order] for k in list(parts)}
    del order
    sig_codes = c.pop("sig")
    cols: dict = {
        "rank": rank_of_grp[grp_codes],
        "seq": c.pop("seq").astype(np.int64),
        "pair_seq": c.pop("pair"),      # p2p_order: the number a send and the recv that took it share
        "t_start_ns": t,
    }
    # Return/end are float32 ns offsets (NaN = not observed): exact enough for
    # an offset, half the size. Converted in place, no full-length where().
    d_end = _offsets_to_int(c.pop("dend"))
    d_ret = _offsets_to_int(c.pop("dret"))
    cols["t_return_ns"] = pd.arrays.IntegerArray(d_ret[0] + t, ~d_ret[1])
    cols["t_end_ns"] = pd.arrays.IntegerArray(d_end[0] + t, ~d_end[1])
    cols["duration_ns"] = pd.arrays.IntegerArray(d_end[0], ~d_end[1])
    del d_end, d_ret
    cols["iteration"] = c.pop("it").astype(np.int32)
    # Process-level columns.
    cols["pid"] = np.array([_pid(p) for p in procs], dtype=np.int32)[proc]
    cols["host"] = _categorical([str(p.header.get("host")) for p in procs], proc)
    cols["file"] = _categorical([p.stem for p in procs], proc)
    # Group-level columns.
    cols["world"] = _categorical([str_or_none(g.get("world_id")) for g in group_rows], grp_codes)
    cols["group"] = _categorical([str_or_none(g.get("name")) for g in group_rows], grp_codes)
    cols["group_desc"] = _categorical([str_or_none(g.get("desc")) for g in group_rows], grp_codes)
    cols["mesh_dim"] = _categorical([mesh_dim_of(g, dims) for g, dims in zip(group_rows, group_meshes)], grp_codes)
    cols["group_size"] = np.array([int_or_none(g.get("size")) or 0 for g in group_rows], np.int32)[grp_codes]
    cols["group_rank"] = np.array([-1 if int_or_none(g.get("rank")) is None else g["rank"]
                                   for g in group_rows], dtype=np.int32)[grp_codes]
    cols["group_ranks"] = _categorical([ranks_text(g.get("ranks")) for g in group_rows], grp_codes)
    cols["backend"] = _categorical([str_or_none(g.get("backend")) for g in group_rows], grp_codes)
    # Sig-level columns: per-sig tables first, then one take per column.
    for f in _SIG_STR:
        cols[f] = _categorical([str_or_none(s.get(f)) for s in sig_rows], sig_codes)
    cols["shapes"] = _categorical([shapes_text(s.get("shapes")) for s in sig_rows], sig_codes)
    cols["out_shapes"] = _categorical([shapes_text(s.get("out_shapes")) for s in sig_rows], sig_codes)
    for f in _SIG_NUM:
        per_sig = np.array([num_or_nan(s.get(f)) for s in sig_rows], dtype=np.float64)
        ok = ~np.isnan(per_sig)
        if f in ("bytes", "out_bytes"):
            cols[f] = np.where(ok, per_sig, 0).astype(np.int64)[sig_codes]
        else:  # small ints (root, tag, bucket): Int32 with <NA> where a sig has none
            vals = np.where(ok & (np.abs(per_sig) < 2**31), per_sig, 0).astype(np.int32)
            cols[f] = pd.arrays.IntegerArray(vals[sig_codes], (~ok)[sig_codes])
    cols["root"] = _with_sources(cols["root"], procs, proc, c["traw"])
    cols["async"] = np.array([bool(s.get("async")) for s in sig_rows], dtype=bool)[sig_codes]
    status = c.pop("st")
    cols["status"] = pd.Categorical.from_codes(
        STATUS_CODE[status], categories=[schema.STATUS_NAMES[i] for i in sorted(schema.STATUS_NAMES)])
    flags = c.pop("fl")
    cols["source"] = pd.Categorical.from_codes((flags & schema.FLAG_SOURCE_MASK).clip(0, 1).astype(np.int8),
                                               categories=list(schema.SOURCE_NAMES.values()))
    cols["end_observed"] = (flags & schema.FLAG_END_OBSERVED).astype(bool)
    cols["error"] = _errors_column(procs, proc, c.pop("traw"))
    buckets = c.pop("bucket")
    del c
    df = pd.DataFrame(cols, copy=False)
    df = assign_buckets(df, {p.stem: p.ddp for p in procs if p.ddp}, buckets, rule)
    return df[_FIRST + [c for c in df.columns if c not in _FIRST]]


def mesh_dims(meshes: list[dict]) -> dict:
    """Group name -> mesh dimension name, from a process's ``mesh`` meta lines (the
    first DeviceMesh that names a group wins)."""
    out: dict = {}
    for m in meshes:
        for d in m.get("dims") or ():
            if isinstance(d, dict) and isinstance(d.get("group"), str) and isinstance(d.get("name"), str):
                out.setdefault(d["group"], d["name"])
    return out


def mesh_dim_of(group: dict, dims: dict) -> str | None:
    """The mesh dimension a group serves: from the process's DeviceMeshes, else from torch's
    group description (DeviceMesh names its groups ``mesh_<dim>``)."""
    name = dims.get(str_or_none(group.get("name")))
    if name is not None:
        return name
    desc = str_or_none(group.get("desc"))
    if desc and desc.startswith("mesh_") and desc != "mesh_default":
        return desc[len("mesh_"):]
    return None


def _offsets_to_int(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ns, valid) from float32 offsets with NaN; ``d`` is consumed (zeroed in place)."""
    valid = ~np.isnan(d)
    np.nan_to_num(d, copy=False, nan=0.0)
    return d.astype(np.int64), valid


def _pid(pt: ProcessTrace) -> int:
    pid = int_or_none(pt.header.get("pid"))
    return pid if pid is not None and 0 <= pid < 2**31 else -1


def _per_op(procs, proc_codes, t_raw, lines: str, value) -> np.ndarray | None:
    """Per row, ``value(line)`` of the one of its process's ``lines`` (errors, sources) that names its raw
    call time, else None (joined on (process, raw call time)); None when no process has such lines."""
    got = {(pi, e["t_call"]): value(e) for pi, pt in enumerate(procs) for e in getattr(pt, lines)
           if int_or_none(e.get("t_call")) is not None}
    if not got:
        return None
    out = np.full(len(t_raw), None, dtype=object)
    for i in np.flatnonzero(np.isin(proc_codes, list({p for p, _ in got}))):
        out[i] = got.get((int(proc_codes[i]), int(t_raw[i])))
    return out


def _errors_column(procs, proc_codes, t_raw) -> pd.Categorical:
    """Error text of failed ops."""
    out = _per_op(procs, proc_codes, t_raw, "errors", lambda e: str(e.get("text", ""))[:2000])
    if out is None:
        return pd.Categorical.from_codes(np.full(len(t_raw), -1, dtype=np.int8), categories=pd.Index([], dtype=object))
    return pd.Categorical(out)


def _with_sources(root: pd.arrays.IntegerArray, procs, proc_codes, t_raw) -> pd.arrays.IntegerArray:
    """``root`` where a recv from any source names the rank it received from (its ``source`` line)."""
    src = _per_op(procs, proc_codes, t_raw, "sources", lambda s: int_or_none(s.get("src")))
    if src is not None and (known := src != None).any():  # noqa: E711 (elementwise)
        root = root.copy()
        root[known] = src[known].astype(np.int32)
    return root


_FIRST = ["rank", "world", "group", "seq", "op", "variant", "shapes", "dtype", "bytes", "t_start_ns",
          "t_return_ns", "t_end_ns", "duration_ns", "status"]


def empty_frame() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in _FIRST})


def python_twin(pt: ProcessTrace, procs: list[ProcessTrace]) -> ProcessTrace:
    """For a C++-layer file, the Python-layer file of the same process (else itself)."""
    if pt.header.get("source") != "cpp":
        return pt
    pid, host = pt.header.get("pid"), pt.header.get("host")
    return next((o for o in procs if o is not pt and o.header.get("source", "python") == "python"
                 and o.header.get("pid") == pid and o.header.get("host") == host), pt)


def _rank_or_minus1(pt: ProcessTrace) -> int:
    return -1 if pt.rank is None else rank_key(pt.world_number or 0, pt.rank)


def rank_in_world(pt: ProcessTrace, world_id) -> int:
    """The process's rank in world ``world_id`` (a process that re-created its default group may
    have another rank in each; the ranks its groups' ``ranks`` name); a world it names no rank of:
    its rank (-1: none)."""
    for w in pt.worlds:
        if world_id is not None and w.get("world_id") == world_id and isinstance(w.get("rank"), int):
            return w["rank"]
    return -1 if pt.rank is None else pt.rank


def number_worlds(procs: list[ProcessTrace]) -> dict:
    """Each process's world number (meta path -> number; rank_ranges.rank_key) when the run has
    several worlds, else {}: its first world's (a C++-layer file: its Python twin's) in
    ``world_numbers``. A process that made several worlds stays a rank of its first."""
    first = {pt.meta_path: python_twin(pt, procs).world_id for pt in procs}
    number = world_numbers([pt.summary() for pt in procs])
    return {m: number.get(w, 0) for m, w in first.items()} if len(set(first.values()) - {None}) > 1 else {}


def world_created_wall_ns(header: dict, world: dict) -> int:
    """When ``world`` (a world line) was created, on the wall clock: the header's start (``t_wall_ns``,
    ``t_mono_ns``: one moment, read together) moved by the world line's ``t_mono_ns``; without the
    latter (an old trace), the header's start (0: none). Meta fields are ints or absent (schema)."""
    wall, mono, made = header.get("t_wall_ns"), header.get("t_mono_ns"), world.get("t_mono_ns")
    return wall + made - mono if None not in (wall, mono, made) else wall or 0


def world_numbers(processes: list[dict]) -> dict:
    """World id -> its number (w0, w1, ...): the worlds that are some process's first, then the others;
    each in the order they were created (the earliest of their processes' ``world_created_wall_ns``;
    a summary without them: its start), then by id. ``processes``: ProcessTrace.summary()s."""
    created: dict = {}
    for p in processes:
        ws = p.get("worlds") or []
        for w, t in zip(ws, p.get("world_created_wall_ns") or [p.get("t_wall_ns") or 0] * len(ws)):
            created[w] = min(t, created.get(w, t))
    first = {p["worlds"][0] for p in processes if p.get("worlds")}
    return {w: i for i, w in enumerate(sorted(created, key=lambda w: (w not in first, created[w], w)))}


def reference_processes(procs: list[ProcessTrace]) -> dict:
    """World id -> the rank-0 process of that world (its clock is the reference)."""
    refs: dict = {}
    for pt in procs:
        for w in pt.worlds:
            if w.get("rank") == 0:
                refs.setdefault(w.get("world_id"), pt)
    return refs


# -- entry points -------------------------------------------------------------------

@dataclass
class Run:
    """A loaded run: the op frame, the processes' summaries, damage found, and on rank 0's clock
    compute spans (DDP forward, backward, optimizer step), user marks and regions (``trace.marks``)."""
    path: str
    frame: pd.DataFrame
    processes: list[dict]
    issues: list[TraceIssue]
    spans: pd.DataFrame | None = None
    marks: pd.DataFrame | None = None
    regions: pd.DataFrame | None = None
    # Processes that never had a rank (never created a process group): the
    # parent of an mp.spawn script, ranks that died before init_process_group,
    # helper subprocesses. Not in ``processes``: they are not ranks.
    unranked: list = field(default_factory=list)


def build_mark_tables(procs: list[ProcessTrace], issues: list[TraceIssue] | None = None, refs: dict | None = None,
                      user_marks: bool = True) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame]:
    """(spans, marks, regions) of every process, on rank 0's clock; span records read one process at
    a time (damage goes to ``issues``). ``user_marks=False``: no marks table (None)."""
    refs = reference_processes(procs) if refs is None else refs
    issues = [] if issues is None else issues
    offsets = {id(pt): clock_offset(pt, refs.get(pt.world_id)) for pt in procs}
    span_parts = ((read_spans(pt, issues), pt.labels, pt.marks, _rank_or_minus1(pt), pt.stem, offsets[id(pt)])
                  for pt in procs)
    spans = mark_tables.spans_table(span_parts)
    marks, regions = [], []
    for pt in procs:
        if not pt.marks:
            continue
        rank, offset = _rank_or_minus1(pt), offsets[id(pt)]
        end = int_or_none((pt.end or {}).get("t_mono_ns"))
        if user_marks:
            marks.append(mark_tables.user_marks_of(pt.marks, rank, pt.stem, offset))
        regions.append(mark_tables.regions_of(pt.marks, rank, pt.stem, offset, end))
    return (spans, mark_tables.concat(marks, mark_tables.empty_marks()) if user_marks else None,
            mark_tables.concat(regions, mark_tables.empty_regions()))


def read_mpi_calls(procs: list[ProcessTrace]) -> pd.DataFrame:
    """The C++ layer's MPI call times (``<stem>.mpi.bin``, trace.layers): file, group (name), seq,
    d_mpi_begin, d_mpi_end; a torn or invalid record is ignored (the ops file reports damage)."""
    rows = []
    for pt in procs:
        path = pt.meta_path[: -len(schema.META_SUFFIX)] + schema.MPI_CALLS_SUFFIX
        rec, _ = bounded.read_segments(path, schema.OP_RECORD, schema.RECORD_SIZE)
        if rec is None:
            continue
        rec = rec[member(rec["group"], defined_ids(pt.groups)) & (rec["seq"] > 0)]
        if len(rec):
            names = [str_or_none(pt.groups[int(g)].get("name")) for g in rec["group"]]
            rows.append(pd.DataFrame({"file": pt.stem, "group": names, "seq": rec["seq"].astype(np.int64),
                                      "d_mpi_begin": rec["d_return"].astype(float),
                                      "d_mpi_end": rec["d_end"].astype(float)}))
    if not rows:
        return pd.DataFrame(columns=["file", "group", "seq", "d_mpi_begin", "d_mpi_end"])
    return pd.concat(rows, ignore_index=True)


def merged_frame(procs: list[ProcessTrace], refs: dict | None = None, world_ranks: bool = False) -> pd.DataFrame:
    """build_frame of ``procs``, C++-layer rows folded into the Python rows of the same ops (trace.layers)."""
    frame = build_frame(procs, refs, world_ranks)
    cpp = [p for p in procs if p.header.get("source") == "cpp"]
    if not cpp:
        return frame
    from .layers import merge_cpp_layer
    return merge_cpp_layer(frame, read_mpi_calls(cpp))


def load_run(run_dir: str | None = None, rank_keys: bool = False, one_run: bool = True) -> Run:
    """The run's ops and tables; ``rank_keys``: ranks given as rank keys (number_worlds), as the report
    keys them; else each op's rank is its process's rank in the op's world (``build_frame``). ``one_run``
    (the default, as report and check do): the files of another run left out (read_run_files)."""
    run_dir = newest_run() if run_dir is None else str(run_dir)
    procs, issues = run_processes(read_run_files(run_dir, one_run=one_run))
    numbers = number_worlds(procs) if rank_keys else {}
    for p in procs:
        p.world_number = numbers.get(p.meta_path)
    describe_clocks(procs)  # before build_frame, which hands each process's records to the frame
    frame = merged_frame(procs, world_ranks=not rank_keys)
    issues.extend(missing_ranks(procs))
    spans, marks, regions = build_mark_tables(procs, issues)
    return Run(os.path.abspath(run_dir), frame, [p.summary() for p in procs if p.rank is not None], issues, spans,
               marks, regions, unranked=[p.summary() for p in procs if p.rank is None])


def run_processes(read: list) -> tuple[list[ProcessTrace], list[TraceIssue]]:
    """(processes, issues) of read_run_files' ``read``."""
    return [pt for _, pt, _ in read if pt is not None], [i for *_, file_issues in read for i in file_issues]


def check_run_ids(processes: list[dict]) -> tuple[str | None, set[str], list]:
    """(majority run id, files to drop, a TraceIssue each) when processes (``ProcessTrace.summary()``s:
    ``file``, ``run_id``, ``t_wall_ns``) disagree on the run id: the files of another run (one directory
    written by two). Runs with as many files: the one started last (``commtrace run -o DIR`` again)."""
    ids = {p["file"]: p.get("run_id") if isinstance(p.get("run_id"), str) else None for p in processes}
    counts = Counter(v for v in ids.values() if v is not None)
    if not counts:
        return None, set(), []
    started: dict = {}
    for p in processes:
        t = p.get("t_wall_ns")
        if ids[p["file"]] is not None and isinstance(t, int):
            started[ids[p["file"]]] = max(started.get(ids[p["file"]], t), t)
    major = max(counts, key=lambda rid: (counts[rid], started.get(rid, -1)))
    drop, issues = set(), []
    for f, rid in sorted(ids.items()):
        if rid is not None and rid != major:
            drop.add(f)
            issues.append(TraceIssue(f, f"belongs to run {rid!r}, not {major!r} like the other traces; skipped",
                                     kind=OTHER_RUN))
    return major, drop, issues


def read_run_files(run_dir: str, records: bool = True,
                   one_run: bool = True) -> list[tuple[str, ProcessTrace | None, list[TraceIssue]]]:
    """Per trace file of run ``run_dir`` (find_traces' order): (meta path, its process or None when
    unreadable, its issues) (read_process); CommtraceError (the first issues) when none is readable.
    ``one_run``: a file of another run (check_run_ids: one directory written by two) is given as None with
    its OTHER_RUN issue, before anything is derived from the files (world numbers, the bucket rule)."""
    read = [(m, read_process(m, issues, records), issues) for m in find_traces(run_dir) for issues in [[]]]
    if all(pt is None for _, pt, _ in read):
        detail = "; ".join([str(i) for *_, issues in read for i in issues][:3])
        raise CommtraceError(f"{run_dir}: no readable trace files ({detail})")
    if one_run:
        _, drop, other = check_run_ids([pt.summary() for _, pt, _ in read if pt is not None])
        why = {i.file: i for i in other}
        read = [(m, None, [*issues, why[os.path.basename(m)]]) if os.path.basename(m) in drop else (m, pt, issues)
                for m, pt, issues in read]
    return read


def missing_ranks(procs: list[ProcessTrace]) -> list[TraceIssue]:
    out = []
    worlds: dict = {}
    for pt in procs:
        if pt.header.get("source") == "cpp":
            continue  # the C++ layer does not know world ids; its Python twin counts
        for w in pt.worlds:
            wid, size = w.get("world_id"), int_or_none(w.get("world_size"))
            if size is not None:
                worlds.setdefault(wid, (size, set()))[1].add(w.get("rank"))
    for wid, (size, ranks) in worlds.items():
        missing = sorted(set(range(size)) - ranks)
        if missing:
            out.append(TraceIssue("", f"ranks missing: {fmt_ranks(missing)} of {size}", kind=RANKS_MISSING,
                                  world=str_or_none(wid), ranks=tuple(missing)))
    return out


TABLES = ("ops", "spans", "marks", "regions", "counts")


def load(run_dir: str | None = None, table: str = "ops") -> pd.DataFrame:
    """One table of a run: ``ops`` (one row per op per rank; ``frame.attrs`` lists
    the processes and any damage found), ``spans`` (compute spans), ``marks``
    (``commtrace.mark``), ``regions`` (``commtrace.region``) or ``counts`` (bounded mode:
    the ops counted instead of written, per process, group and op); times on rank 0's clock.

    Warns (CommtraceWarning) once per problem; raises CommtraceError when nothing
    in ``run_dir`` is usable.
    """
    if table not in TABLES:
        raise CommtraceError(f"table {table!r}: unknown (one of {', '.join(TABLES)})")
    run = load_run(run_dir)   # the files the report leaves out (another run's), left out here too
    for issue in run.issues:
        warnings.warn(str(issue), CommtraceWarning, stacklevel=2)
    if table == "counts":
        df = bounded.counts_table(run.processes)
    else:
        df = {"ops": run.frame, "spans": run.spans, "marks": run.marks, "regions": run.regions}[table]
    df.attrs["run_dir"] = run.path
    df.attrs["incomplete"] = [str(i) for i in run.issues]
    for key in ("processes", "unranked") if table == "ops" else ():
        df.attrs[key] = [{k: v for k, v in p.items() if k not in ("marks", "dumps")} for p in getattr(run, key)]
    return df
