"""Diagnose hangs, desyncs, crashes and stragglers from a loaded run (``commtrace check``).

Pure functions over ``Run`` (the op frame plus what each process said about
itself); no rendering here. ``diagnose(run)`` returns a list of ``Finding``;
``render.check_text.render_findings`` draws them.

Matching follows PyTorch's Flight Recorder: the same collective on every member
of a process group has the same (world, group, seq). At one sequence number we
compare the op type, input sizes, dtype, reduce op and root; a member with no
record for a sequence number that other members entered never arrived there.
Point-to-point ops (seq counted per (op, peer)) are matched send<->recv and
only reported as informational unless they were still in flight.

Severities: ``error`` (the job hung, desynced, crashed or lost data), ``warning``
(likely a problem: a straggler, a variant mismatch), ``info`` (context: group
progress, dumps, matched-but-unusual p2p). ``exit_code`` maps them to the CLI's
0/1.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from . import coverage

ERROR, WARNING, INFO = "error", "warning", "info"
_SEV_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}

# Kinds of findings (stable strings: tests and JSON output use them).
NOT_ARRIVED = "not_arrived"        # some members entered a collective, others never did
MISMATCH = "mismatch"              # members disagree at the same seq (op, sizes, dtype, reduce op, root)
STUCK = "stuck"                    # every member entered, none/some never finished
FAILED = "failed"                  # the op raised on some ranks
EXCEPTION = "exception"            # the script raised on a rank
EXITED = "exited"                  # a rank exited with a non-zero code / by a signal
ABRUPT = "abrupt"                  # a rank's trace ends without an end record, or is truncated
MISSING_RANK = "missing_rank"      # a member rank wrote no trace at all
DAMAGED = "damaged"                # part of a trace file cannot be read (corrupt, cut, missing)
LOST_RECORD = "lost_record"        # a rank's record of a collective is unreadable (it did arrive: later ones exist)
NO_GROUP = "no_group"              # a process ended badly before it created any process group
STRAGGLER = "straggler"            # a rank is consistently the last to arrive
P2P_UNMATCHED = "p2p_unmatched"    # a send/recv without its counterpart
DUMP = "dump"                      # the watchdog or a signal wrote a state dump
PROGRESS = "progress"              # per group: last seq each rank completed
TRACE_ISSUE = "trace_issue"        # reader-level damage not covered above

# Ops whose input sizes must agree across the group (Flight Recorder's SIZE check).
_SAME_INPUT_SHAPES = {"all_reduce", "broadcast", "reduce", "all_gather", "gather", "reduce_scatter"}
_SAME_OUTPUT_SHAPES = {"scatter"}
_HAS_REDUCE_OP = {"all_reduce", "reduce", "reduce_scatter"}
_HAS_ROOT = {"broadcast", "reduce", "gather", "scatter"}
_P2P = {"send", "recv"}

STRAGGLER_MIN_OPS = 4             # collectives every member completed
STRAGGLER_MIN_SHARE = 0.6         # share of them where the rank arrived last
STRAGGLER_MIN_LAG_NS = 50_000_000  # median wait it imposed (last arrival - median arrival)


@dataclass
class Finding:
    kind: str
    severity: str
    title: str                                     # one line, plain text
    details: list[str] = field(default_factory=list)
    world: str | None = None
    group: str | None = None
    seq: int | None = None
    op: str | None = None
    ranks: list[int] = field(default_factory=list)  # ranks this finding is about (e.g. never arrived)
    data: dict = field(default_factory=dict)        # machine-readable extras (JSON-safe)

    def to_dict(self) -> dict:
        return _jsonable(asdict(self))


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return None if np.isnan(v) else float(v)
    if v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    return v


def exit_code(findings: list[Finding], strict: bool = False) -> int:
    """0 clean, 1 problems (errors; with ``strict`` also warnings)."""
    bad = {ERROR, WARNING} if strict else {ERROR}
    return 1 if any(f.severity in bad for f in findings) else 0


# -- helpers ---------------------------------------------------------------------

def _s(v) -> str | None:
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and np.isnan(v):
        return None
    return str(v)


def _int(v) -> int | None:
    try:
        if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
            return None
        return int(v)
    except (TypeError, ValueError):
        return None


def parse_ranks(text) -> list[int]:
    """``"0,1,2"`` -> [0, 1, 2]; anything unparsable -> []."""
    s = _s(text)
    if not s:
        return []
    out = []
    for part in s.split(","):
        part = part.strip()
        if part.lstrip("-").isdigit():
            out.append(int(part))
    return out


def _fmt_ranks(ranks) -> str:
    ranks = sorted(set(int(r) for r in ranks))
    if not ranks:
        return "-"
    # compress runs: 0-3,5
    parts, start, prev = [], ranks[0], ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(parts)


def _fmt_age(ns) -> str:
    if ns is None:
        return "?"
    s = ns / 1e9
    return f"{s:.1f} s" if s >= 1 else f"{ns / 1e6:.0f} ms"


def _group_label(world, group, desc=None) -> str:
    g = f"group {group}"
    if desc and desc != group:
        g += f" ({desc})"
    return g


def _op_desc(row) -> str:
    """all_reduce [[10]] float32 SUM"""
    parts = [str(row.get("op"))]
    shapes = _s(row.get("shapes"))
    if shapes:
        parts.append(shapes)
    dt = _s(row.get("dtype"))
    if dt:
        parts.append(dt)
    ro = _s(row.get("reduce_op"))
    if ro:
        parts.append(ro)
    root = _int(row.get("root"))
    if root is not None and str(row.get("op")) in _HAS_ROOT:
        parts.append(f"root={root}")
    return " ".join(parts)


# -- process facts -----------------------------------------------------------------

@dataclass
class RankFate:
    rank: int
    files: list[str]
    complete: bool
    exit_code: int | None
    how: str | None
    exception: dict | None
    issues: list[str]
    damage: list[str] = field(default_factory=list)  # damaged parts of its files (reader's phrases)
    lost: dict = field(default_factory=dict)         # group -> [first seq, last seq, count] of unreadable records

    def describe(self) -> str:
        if self.exception:
            return f"raised {self.exception.get('exc_type')}: {_first_line(self.exception.get('message'))}"
        if not self.complete:
            meta_cut = [d for d in self.damage if ".meta.jsonl" in d]
            if meta_cut and self.how is None:
                return f"trace file damaged ({meta_cut[0]}): how the process ended is unknown"
            if any("truncated" in i for i in self.issues):
                return "trace truncated (process killed or disk full?)"
            return "trace ends abruptly (killed, e.g. SIGKILL, or still running)"
        if self.how == "hang":
            return f"aborted by the hang watchdog (--abort-on-hang, exit code {self.exit_code})"
        if self.how == "signal":
            return f"terminated by {_signal_name(self.exit_code)} (exit code {self.exit_code})"
        if self.exit_code not in (None, 0):
            return f"exited with code {self.exit_code}"
        return "exited normally"


def _signal_name(code) -> str:
    import signal
    try:
        return signal.Signals(int(code) - 128).name
    except (TypeError, ValueError):
        return "a signal"


def _first_line(s) -> str:
    s = "" if s is None else str(s)
    line = s.strip().splitlines()[0] if s.strip() else ""
    return line.lstrip("- ")[:300]  # mp.spawn's "-- Process 1 terminated with ..."


def rank_fates(run) -> dict[int, RankFate]:
    fates: dict[int, RankFate] = {}
    by_file: dict[str, list[str]] = {}
    for issue in run.issues:
        f = str(getattr(issue, "file", ""))
        stem = f.split(".meta.jsonl")[0].split(".ops.bin")[0]
        by_file.setdefault(stem, []).append(str(getattr(issue, "problem", issue)))
    for p in run.processes:
        r = _int(p.get("rank"))
        if r is None:
            continue
        stem = str(p.get("file", "")).split(".meta.jsonl")[0]
        end = p.get("end") if isinstance(p.get("end"), dict) else None
        exc = p.get("exception") if isinstance(p.get("exception"), dict) else None
        fate = fates.get(r)
        if fate is None:
            fate = fates[r] = RankFate(r, [], True, None, None, None, [])
        fate.files.append(str(p.get("file")))
        fate.complete = fate.complete and bool(p.get("complete", True))
        if end is not None:
            ec = _int(end.get("exit_code"))
            if ec is not None and ec != 0 or fate.exit_code is None:
                fate.exit_code = ec
            fate.how = _s(end.get("how")) or fate.how
        fate.exception = exc or fate.exception
        fate.issues.extend(by_file.get(stem, []))
        fate.damage.extend(str(d) for d in p.get("damage") or [])
        for g, span in (p.get("lost") or {}).items():
            if isinstance(span, list) and len(span) == 3:
                fate.lost[str(g)] = span
    return fates


# -- processes that never had a rank ---------------------------------------------------

@dataclass
class EarlyProcess:
    """A process that ended before it created any process group (``Run.unranked``)."""
    label: str           # "rank 1" (launcher's rank), "mp.spawn process 1", or "pid 123 (train.py)"
    rank: int | None     # the launcher's rank, when it gave one to this very process
    fate: RankFate


def _launch_rank(p: dict) -> int | None:
    env = p.get("launch_env") if isinstance(p.get("launch_env"), dict) else {}
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        v = env.get(name)
        if isinstance(v, str) and v.strip().isdigit():
            return int(v)
    return None


def early_processes(run) -> list[EarlyProcess]:
    """Every rank-less process, with who it was. A process whose parent is a
    traced process of the same launcher rank is that rank's helper (a
    subprocess or forked worker inheriting its variables), not the rank."""
    unranked = [p for p in getattr(run, "unranked", None) or [] if isinstance(p, dict)]
    every = [p for p in list(run.processes) + unranked if isinstance(p, dict)]
    by_pid = {(p.get("host"), p.get("pid")): p for p in every}
    out = []
    for p in unranked:
        parent = by_pid.get((p.get("host"), p.get("ppid")))
        rank = _launch_rank(p)
        if rank is not None and parent is not None and (_launch_rank(parent) == rank or _int(parent.get("rank")) == rank):
            rank = None
        spawn = _int(p.get("spawn_index"))
        if rank is not None:
            label = f"rank {rank}"
        elif spawn is not None:
            label = f"mp.spawn process {spawn}"
        else:
            cmd = p.get("command") if isinstance(p.get("command"), list) else p.get("argv")
            what = " ".join(str(c) for c in cmd[:3]) if isinstance(cmd, list) and cmd else "?"
            label = f"pid {p.get('pid')} ({what[:80]})"
        end = p.get("end") if isinstance(p.get("end"), dict) else None
        fate = RankFate(-1 if rank is None else rank, [str(p.get("file"))], bool(p.get("complete", True)),
                        _int(end.get("exit_code")) if end else None, _s(end.get("how")) if end else None,
                        p.get("exception") if isinstance(p.get("exception"), dict) else None, [],
                        [str(d) for d in p.get("damage") or []])
        out.append(EarlyProcess(label, rank, fate))
    return out


def diagnose_early(early: list[EarlyProcess], ranked: set) -> list[Finding]:
    """Processes that raised, exited non-zero, were killed or whose trace ends
    abruptly before they created a process group. A helper process (no rank,
    not an mp.spawn process) whose trace just ends is only informational."""
    out = []
    # Root causes first: ranks that raised, then ranks torn down, then other processes.
    early = sorted(early, key=lambda e: (e.label.startswith("pid "), not e.fate.exception, e.label))
    for e in early:
        if e.rank is not None and e.rank in ranked:
            continue  # the rank's own process group trace says more (a restarted rank, ...)
        fate = e.fate
        identified = not e.label.startswith("pid ")
        if fate.exception or fate.complete and (fate.how in ("signal", "hang", "exception")
                                                or fate.exit_code not in (None, 0)):
            sev = ERROR
        elif not fate.complete:
            sev = ERROR if identified else INFO  # a helper's trace that just ends: context only
        else:
            continue
        bad = fate.describe()
        # A helper (the parent of mp.spawn, a subprocess) never meant to create a group.
        when = " before any process group existed" if identified else ""
        f = Finding(NO_GROUP, sev, f"{e.label} {bad}{when}",
                    ranks=[] if e.rank is None else [e.rank],
                    data={"process": e.label, "files": fate.files, "exit_code": fate.exit_code, "how": fate.how})
        if fate.exception:
            f.data.update(exc_type=fate.exception.get("exc_type"), message=fate.exception.get("message"))
            text = _s(fate.exception.get("text"))
            if text:
                f.details.extend(text.rstrip().splitlines()[-12:])
        out.append(f)
    return out


def diagnose_damage(run) -> list[Finding]:
    """Trace data that could not be read: an error (the diagnosis may lack it)."""
    out = []
    for p in list(run.processes) + list(getattr(run, "unranked", None) or []):
        damage = [str(d) for d in p.get("damage") or []] if isinstance(p, dict) else []
        if not damage:
            continue
        r = _int(p.get("rank"))
        who = f"rank {r}" if r is not None else f"pid {p.get('pid')}"
        out.append(Finding(DAMAGED, ERROR, f"{who}: trace damaged: {'; '.join(damage)}",
                           ranks=[] if r is None else [r], data={"file": p.get("file"), "damage": damage}))
    return out


def _world_sizes(run) -> dict:
    """world_size per process -> expected ranks (one world assumed when ids are absent)."""
    sizes = [_int(p.get("world_size")) for p in run.processes]
    sizes = [s for s in sizes if s]
    return max(sizes) if sizes else 0


# -- collectives -------------------------------------------------------------------

def _collectives(df: pd.DataFrame) -> pd.DataFrame:
    if len(df) == 0:
        return df
    return df[~df["op"].astype(str).isin(_P2P)]


def _group_members(gdf: pd.DataFrame) -> list[int]:
    members: set[int] = set()
    for text in gdf["group_ranks"].dropna().unique():
        members.update(parse_ranks(text))
    if not members:
        members = set(int(r) for r in gdf["rank"].unique())
    return sorted(members)


def _last_op_of(rdf: pd.DataFrame):
    if len(rdf) == 0:
        return None
    return rdf.sort_values("t_start_ns", kind="stable").iloc[-1]


def group_progress(df: pd.DataFrame) -> list[dict]:
    """Per (world, group): members and, per rank, last seq completed / entered."""
    out = []
    coll = _collectives(df)
    if len(coll) == 0:
        return out
    for (world, group), gdf in coll.groupby(["world", "group"], observed=True, sort=True):
        members = _group_members(gdf)
        per_rank = {}
        for r in members:
            rdf = gdf[gdf["rank"] == r]
            done = rdf[rdf["status"].astype(str) == "completed"]
            per_rank[r] = {
                "last_completed": _int(done["seq"].max()) if len(done) else None,
                "last_entered": _int(rdf["seq"].max()) if len(rdf) else None,
                "in_flight": sorted(int(s) for s in rdf.loc[rdf["status"].astype(str) == "in_flight", "seq"]),
            }
        desc = _s(gdf["group_desc"].iloc[0]) if "group_desc" in gdf else None
        out.append({"world": _s(world), "group": _s(group), "desc": desc, "members": members, "ranks": per_rank})
    return out


def _compare_at_seq(sdf: pd.DataFrame) -> list[tuple[str, dict]]:
    """Flight-Recorder-style mismatch categories among the ranks' rows at one seq.

    Returns [(category, {value: [ranks]})] for each disagreeing field."""
    out = []
    ops = sdf["op"].astype(str)

    def split(col_values) -> dict:
        groups: dict = {}
        for r, v in zip(sdf["rank"], col_values):
            groups.setdefault(v, []).append(int(r))
        return groups

    by_op = split(list(ops))
    if len(by_op) > 1:
        return [("op", by_op)]  # other fields are meaningless across op types
    op = ops.iloc[0]
    variants = split([_s(v) for v in sdf["variant"]])
    if len(variants) > 1:
        out.append(("variant", variants))
    if op in _SAME_INPUT_SHAPES or op in _SAME_OUTPUT_SHAPES:
        col = "shapes" if op in _SAME_INPUT_SHAPES else "out_shapes"
        sh = split([_s(v) for v in sdf[col]])
        if len(sh) > 1:
            out.append(("sizes", sh))
    dts = split([_s(v) for v in sdf["dtype"]])
    if len([k for k in dts if k not in (None, "mixed")]) > 1:
        out.append(("dtype", dts))
    if op in _HAS_REDUCE_OP:
        ro = split([_s(v) for v in sdf["reduce_op"]])
        if len(ro) > 1:
            out.append(("reduce_op", ro))
    if op in _HAS_ROOT:
        rt = split([_int(v) for v in sdf["root"]])
        if len(rt) > 1:
            out.append(("root", rt))
    return out


def _fmt_split(split: dict) -> str:
    return "; ".join(f"{k if k is not None else '-'} on rank {_fmt_ranks(v)}"
                     for k, v in sorted(split.items(), key=lambda kv: min(kv[1])))


def _offset_at_start(p: dict) -> int:
    """The process's clock offset to rank 0's at its start (0 when unknown or on one host)."""
    clock = p.get("clock") if isinstance(p.get("clock"), dict) else {}
    aligned, start = _int(clock.get("start_aligned_ns")), _int(p.get("t_mono_ns"))
    return aligned - start if aligned is not None and start is not None else 0


def _now_ns(df: pd.DataFrame, run) -> int | None:
    """The latest moment the trace knows of (for in-flight ages)."""
    cands = []
    for p in run.processes:
        end = p.get("end")
        if isinstance(end, dict) and _int(end.get("t_mono_ns")) is not None:
            cands.append(_int(end["t_mono_ns"]) + _offset_at_start(p))   # on rank 0's clock, as the frame
    if len(df):
        cands.append(_int(pd.to_numeric(df["t_start_ns"], errors="coerce").max()))
        te = pd.to_numeric(df["t_end_ns"], errors="coerce").max()
        if _int(te) is not None:
            cands.append(_int(te))
    cands = [c for c in cands if c is not None]
    return max(cands) if cands else None


def diagnose_collectives(df: pd.DataFrame, fates: dict[int, RankFate], run=None) -> list[Finding]:
    findings: list[Finding] = []
    coll = _collectives(df)
    if len(coll) == 0:
        return findings
    now = _now_ns(df, run) if run is not None else None
    for (world, group), gdf in coll.groupby(["world", "group"], observed=True, sort=True):
        world_s, group_s = _s(world), _s(group)
        desc = _s(gdf["group_desc"].iloc[0]) if "group_desc" in gdf else None
        glabel = _group_label(world_s, group_s, desc)
        members = _group_members(gdf)
        by_seq = {int(s): sdf for s, sdf in gdf.groupby("seq", sort=True)}
        # Mismatches: every seq where the present ranks disagree.
        n_mismatch = 0
        for seq, sdf in by_seq.items():
            if sdf["rank"].nunique() < 2:
                continue
            sdf = sdf.drop_duplicates("rank", keep="last")
            cats = _compare_at_seq(sdf)
            if not cats:
                continue
            n_mismatch += 1
            if n_mismatch > 5:
                continue
            severity = ERROR if any(c != "variant" for c, _ in cats) else WARNING
            op = str(sdf["op"].iloc[0])
            names = ", ".join(c for c, _ in cats)
            f = Finding(MISMATCH, severity,
                        f"{glabel} seq {seq}: ranks disagree on {names} ({op})",
                        world=world_s, group=group_s, seq=seq, op=op,
                        ranks=sorted(int(r) for r in sdf["rank"]),
                        data={"categories": {c: {str(k): v for k, v in s.items()} for c, s in cats}})
            for c, s in cats:
                f.details.append(f"{c}: {_fmt_split(s)}")
            for _, row in sdf.iterrows():
                f.details.append(f"rank {int(row['rank'])}: {_op_desc(row)} [{row['status']}] at {_s(row.get('callsite')) or '?'}")
            findings.append(f)
        if n_mismatch > 5:
            findings.append(Finding(MISMATCH, ERROR, f"{glabel}: {n_mismatch - 5} more mismatched sequence numbers",
                                    world=world_s, group=group_s))
        # Never arrived: members without a row at a seq others entered -- unless
        # the rank's record was lost (a later seq of the group exists on that rank,
        # or its file says it could not read records there): then it did arrive.
        last_seq = {int(r): int(s) for r, s in gdf.groupby("rank", observed=True)["seq"].max().items()}
        missing_runs, lost_runs = [], []
        for seq, sdf in by_seq.items():
            present = set(int(r) for r in sdf["rank"])
            absent = [r for r in members if r not in present]
            lost = [r for r in absent if last_seq.get(r, 0) > seq or _lost_at(fates.get(r), group_s, seq)]
            missing = [r for r in absent if r not in lost]
            if missing:
                missing_runs.append((seq, sdf, missing))
            if lost:
                lost_runs.append((seq, sdf, lost))
        if lost_runs:
            findings.append(_lost_record(glabel, world_s, group_s, lost_runs, fates, last_seq))
        if missing_runs:
            seq, sdf, missing = missing_runs[0]
            findings.append(_not_arrived(glabel, world_s, group_s, seq, sdf, missing, df, fates, now,
                                         later=len(missing_runs) - 1))
        # Stuck: everyone entered, someone never finished (not explained by a missing rank).
        first_missing = missing_runs[0][0] if missing_runs else None
        mismatched = {f.seq for f in findings if f.kind == MISMATCH and f.group == group_s and f.world == world_s}
        for seq, sdf in by_seq.items():
            if first_missing is not None and seq >= first_missing:
                break
            if seq in mismatched:
                continue
            st = sdf["status"].astype(str)
            if (st == "in_flight").any():
                waiting = sorted(int(r) for r in sdf.loc[st == "in_flight", "rank"])
                row = sdf.iloc[0]
                f = Finding(STUCK, ERROR,
                            f"{glabel} seq {seq}: {row['op']} entered by all {len(members)} ranks but never "
                            f"finished on rank {_fmt_ranks(waiting)}",
                            world=world_s, group=group_s, seq=seq, op=str(row["op"]), ranks=waiting)
                f.details.append(f"op: {_op_desc(row)} at {_s(row.get('callsite')) or '?'}")
                for r in waiting:
                    fate = fates.get(r)
                    if fate is not None:
                        f.details.append(f"rank {r}: {fate.describe()}")
                findings.append(f)
                break
        # Failed ops: first failing seq in this group.
        failed = gdf[gdf["status"].astype(str) == "failed"]
        if len(failed):
            seq = int(failed["seq"].min())
            fr = failed[failed["seq"] == seq]
            row = fr.iloc[0]
            f = Finding(FAILED, ERROR,
                        f"{glabel} seq {seq}: {row['op']} failed on rank {_fmt_ranks(fr['rank'])}"
                        + (f" (and {failed['seq'].nunique() - 1} later op(s))" if failed["seq"].nunique() > 1 else ""),
                        world=world_s, group=group_s, seq=seq, op=str(row["op"]),
                        ranks=sorted(int(r) for r in fr["rank"]))
            for _, r in fr.iterrows():
                f.details.append(f"rank {int(r['rank'])}: {_first_line(_s(r.get('error')) or 'error text not recorded')}")
            findings.append(f)
    return findings


def _lost_at(fate, group_s, seq) -> bool:
    """The rank's file has unreadable records that may be this one: in this
    group around this seq, or in a group it cannot name (then any seq)."""
    if fate is None:
        return False
    if "?" in fate.lost:
        return True
    span = fate.lost.get(str(group_s))
    return bool(span) and _int(span[0]) is not None and _int(span[0]) <= seq <= (_int(span[1]) or 0)


def _lost_record(glabel, world_s, group_s, lost_runs, fates, last_seq) -> Finding:
    """Collectives a rank did reach but whose record is unreadable: the damaged file is the cause."""
    seq, sdf, lost = lost_runs[0]
    op = str(sdf["op"].iloc[0])
    seqs = [s for s, _, _ in lost_runs]
    span = f"seq {seqs[0]}" if len(seqs) == 1 else f"seq {seqs[0]}..{seqs[-1]} ({len(seqs)} sequence numbers)"
    causes = []
    for r in lost:
        fate = fates.get(r)
        damage = "; ".join(fate.damage) if fate is not None and fate.damage else "records missing from its trace"
        causes.append(damage if len(lost) == 1 else f"rank {r}: {damage}")
    title = f"{glabel} {span}: the records of rank {_fmt_ranks(lost)} are unreadable ({'; '.join(causes)})"
    f = Finding(LOST_RECORD, ERROR, title, world=world_s, group=group_s, seq=seq, op=op, ranks=list(lost),
                data={"seqs": seqs, "lost": list(lost)})
    for r in lost:
        if last_seq.get(r, 0) > seq:
            f.details.append(f"rank {r} reached seq {last_seq[r]} of this group, so it did call seq {seq}")
    return f


def _not_arrived(glabel, world_s, group_s, seq, sdf, missing, df, fates, now, later) -> Finding:
    row = sdf.iloc[0]
    op = str(row["op"])
    entered = sorted(int(r) for r in sdf["rank"])
    st = sdf.set_index("rank")["status"].astype(str)
    waiting = [r for r in entered if st.get(r) == "in_flight"]
    title = (f"{glabel} seq {seq}: {op} {(_s(row.get('shapes')) or '')} entered by rank {_fmt_ranks(entered)}; "
             f"rank {_fmt_ranks(missing)} never arrived")
    f = Finding(NOT_ARRIVED, ERROR, title.replace("  ", " "), world=world_s, group=group_s, seq=seq, op=op,
                ranks=list(missing),
                data={"entered": entered, "waiting": waiting, "missing": list(missing)})
    f.details.append(f"op: {_op_desc(row)} called at {_s(row.get('callsite')) or '?'}")
    for _, r in sdf.drop_duplicates("rank", keep="last").iterrows():
        rk = int(r["rank"])
        status = str(r["status"])
        age = ""
        if status == "in_flight" and now is not None and _int(r["t_start_ns"]) is not None:
            age = f", waiting at least {_fmt_age(now - int(r['t_start_ns']))}"
        f.details.append(f"rank {rk} entered: {status}{age}")
    for m in missing:
        rdf = df[df["rank"] == m]  # its last op anywhere (it may be stuck in another group)
        last = _last_op_of(rdf)
        fate = fates.get(m)
        if last is None:
            where = "no op traced"
        else:
            ing = "" if _s(last["group"]) == group_s and _s(last["world"]) == world_s else f" in group {last['group']}"
            where = (f"last call{ing} seq {int(last['seq'])} {last['op']} [{last['status']}] at "
                     f"{_s(last.get('callsite')) or '?'}")
        fate_s = fate.describe() if fate is not None else "no usable trace file"
        f.details.append(f"rank {m} never arrived: {where}; {fate_s}")
        f.data.setdefault("last_callsite", {})[str(m)] = None if last is None else _s(last.get("callsite"))
    if later:
        f.details.append(f"{later} later sequence number(s) also lack some ranks (a consequence of this one)")
    return f


# -- point to point ------------------------------------------------------------------

def diagnose_p2p(df: pd.DataFrame) -> list[Finding]:
    if len(df) == 0:
        return []
    p = df[df["op"].astype(str).isin(_P2P)]
    if len(p) == 0:
        return []
    findings = []
    keys = {}
    for _, r in p.iterrows():
        peer = _int(r.get("root"))
        if peer is None or peer < 0:
            continue
        keys[(_s(r["world"]), _s(r["group"]), str(r["op"]), int(r["rank"]), peer, int(r["seq"]))] = r
    unmatched = []
    for (w, g, op, rank, peer, seq), r in keys.items():
        other = "recv" if op == "send" else "send"
        if (w, g, other, peer, rank, seq) not in keys:
            unmatched.append(r)
    for r in unmatched[:10]:
        st = str(r["status"])
        sev = ERROR if st == "in_flight" else INFO
        peer = _int(r.get("root"))
        what = "recv from" if str(r["op"]) == "recv" else "send to"
        findings.append(Finding(P2P_UNMATCHED, sev,
                                f"rank {int(r['rank'])} {what} rank {peer} #{int(r['seq'])} ({_s(r.get('shapes'))}) "
                                f"has no matching {'send' if str(r['op']) == 'recv' else 'recv'} [{st}]",
                                details=[f"called at {_s(r.get('callsite')) or '?'}"],
                                world=_s(r["world"]), group=_s(r["group"]), seq=int(r["seq"]), op=str(r["op"]),
                                ranks=[int(r["rank"])]))
    return findings


# -- stragglers -----------------------------------------------------------------------

def diagnose_stragglers(df: pd.DataFrame) -> list[Finding]:
    coll = _collectives(df)
    if len(coll) == 0:
        return []
    findings = []
    coll = coll[coll["status"].astype(str) == "completed"]
    for (world, group), gdf in coll.groupby(["world", "group"], observed=True, sort=True):
        members = _group_members(gdf)
        if len(members) < 2:
            continue
        piv = gdf.drop_duplicates(["seq", "rank"], keep="last").pivot(index="seq", columns="rank", values="t_start_ns")
        piv = piv.reindex(columns=members).dropna()
        if len(piv) < STRAGGLER_MIN_OPS:
            continue
        arr = piv.to_numpy(dtype=np.float64)
        last = arr.argmax(axis=1)
        lag = arr.max(axis=1) - np.median(arr, axis=1) if len(members) > 2 else arr.max(axis=1) - arr.min(axis=1)
        for ci, r in enumerate(piv.columns):
            sel = last == ci
            share = sel.mean()
            if share < STRAGGLER_MIN_SHARE:
                continue
            med = float(np.median(lag[sel]))
            if med < STRAGGLER_MIN_LAG_NS:
                continue
            total = float(lag[sel].sum())
            findings.append(Finding(
                STRAGGLER, WARNING,
                f"{_group_label(_s(world), _s(group))}: rank {int(r)} arrived last at {int(sel.sum())} of {len(piv)} "
                f"collectives (median wait it caused {_fmt_age(med)}, total {_fmt_age(total)})",
                world=_s(world), group=_s(group), ranks=[int(r)],
                data={"share_last": float(share), "median_lag_ns": med, "total_lag_ns": total}))
    return findings


# -- processes ---------------------------------------------------------------------

def diagnose_processes(run, fates: dict[int, RankFate], df: pd.DataFrame, early=()) -> list[Finding]:
    findings = []
    for r in sorted(fates):
        fate = fates[r]
        rdf = df[df["rank"] == r] if len(df) else df
        last = _last_op_of(rdf) if len(rdf) else None
        last_s = (f"last op: {last['op']} seq {int(last['seq'])} [{last['status']}] at {_s(last.get('callsite')) or '?'}"
                  if last is not None else "no ops traced")
        if fate.exception:
            exc = fate.exception
            f = Finding(EXCEPTION, ERROR,
                        f"rank {r} raised {exc.get('exc_type')}: {_first_line(exc.get('message'))}",
                        details=[last_s], ranks=[r],
                        data={"exc_type": exc.get("exc_type"), "message": exc.get("message")})
            text = _s(exc.get("text"))
            if text:
                f.details.extend(text.rstrip().splitlines()[-12:])
            findings.append(f)
        elif fate.complete and (fate.how in ("signal", "hang") or fate.exit_code not in (None, 0)):
            findings.append(Finding(EXITED, ERROR, f"rank {r} {fate.describe()}", details=[last_s], ranks=[r],
                                    data={"exit_code": fate.exit_code, "how": fate.how}))
        if not fate.complete:
            f = Finding(ABRUPT, ERROR, f"rank {r}: {fate.describe()}", details=[last_s, *fate.issues], ranks=[r],
                        data={"issues": fate.issues})
            findings.append(f)
    # Member ranks that wrote nothing.
    size = _world_sizes(run)
    expected = set(range(size))
    if len(df):
        for text in df["group_ranks"].dropna().unique():
            expected.update(parse_ranks(text))
    missing = sorted(expected - set(fates) - {e.rank for e in early if e.rank is not None})
    unreadable: dict[int, list[str]] = {}
    for issue in run.issues:
        m = re.match(r"rank(\d+)\.pid\d+\.", str(getattr(issue, "file", "")))
        if m and int(m.group(1)) in missing:
            unreadable.setdefault(int(m.group(1)), []).append(f"{issue.file}: {issue.problem}")
    for r in missing:
        if r in unreadable:
            findings.append(Finding(MISSING_RANK, ERROR, f"rank {r}: trace file unusable (the process died "
                                    f"before its first flush, < 0.5 s after it started tracing?)",
                                    details=unreadable[r], ranks=[r]))
    rest = [r for r in missing if r not in unreadable]
    if rest:
        f = Finding(MISSING_RANK, ERROR, f"rank {_fmt_ranks(rest)}: no trace file "
                    f"(never started, or died before its first collective)", ranks=rest)
        f.details.extend(f"maybe {e.label}, which never created a process group" for e in early
                         if e.rank is None and not e.label.startswith("pid "))
        findings.append(f)
    return findings


def diagnose_dumps(run) -> list[Finding]:
    out = []
    for p in run.processes:
        for d in p.get("dumps") or []:
            if not isinstance(d, dict):
                continue
            path = _s(d.get("path"))
            reason = _s(d.get("reason")) or "?"
            r = _int(p.get("rank"))
            f = Finding(DUMP, INFO, f"rank {r}: state dump ({reason}) {path}", ranks=[] if r is None else [r],
                        data={"path": path, "reason": reason})
            f.details.extend(dump_summary(path, run.path))
            out.append(f)
    return out


_OWN_FRAMES = (os.path.join("capture", "watchdog.py"), os.path.join("capture", "activate.py"))


def dump_summary(path: str | None, run_dir: str | None = None, max_frames: int = 4) -> list[str]:
    """A few lines from a watchdog dump: in-flight ops and the innermost user frames."""
    if not path:
        return []
    cand = path if os.path.isabs(path) else os.path.join(run_dir or "", path)
    if not os.path.isfile(cand) and run_dir:
        cand = os.path.join(run_dir, os.path.basename(path))
    try:
        with open(cand, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > 16 * 1024 * 1024:
                return ["(dump too large to summarize)"]
            obj = json.loads(fh.read())
    except (OSError, ValueError):
        return ["(dump file unreadable)"]
    if not isinstance(obj, dict):
        return []
    lines = []
    for op in (obj.get("in_flight") or [])[:5]:
        if isinstance(op, dict):
            lines.append(f"in flight: {op.get('op')} group {op.get('group')} seq {op.get('seq')} "
                         f"{op.get('shapes')} for {op.get('age_s')} s at {op.get('callsite')}")
    for th in obj.get("threads") or []:
        if not isinstance(th, dict) or th.get("name") != "MainThread":
            continue
        frames = [fr for fr in th.get("frames") or [] if isinstance(fr, dict)
                  and not str(fr.get("file", "")).endswith(_OWN_FRAMES)]
        for fr in frames[-max_frames:]:
            lines.append(f"  {fr.get('file')}:{fr.get('line')} in {fr.get('function')}")
    return lines


def diagnose_issues(run, fates: dict[int, RankFate]) -> list[Finding]:
    """Reader issues not already explained by a per-rank finding."""
    out = []
    covered = {i for f in fates.values() for i in f.issues}
    for issue in run.issues:
        prob = str(getattr(issue, "problem", issue))
        if getattr(issue, "kind", None) == "damaged":
            continue  # diagnose_damage names it
        if prob in covered or "trace ends abruptly" in prob or prob.startswith("ranks missing") \
                or re.match(r"rank\d+\.pid\d+\.", str(getattr(issue, "file", ""))) and rank_is_missing(issue, fates):
            continue
        out.append(Finding(TRACE_ISSUE, WARNING, str(issue)))
    return out


def rank_is_missing(issue, fates) -> bool:
    m = re.match(r"rank(\d+)\.pid\d+\.", str(getattr(issue, "file", "")))
    return bool(m) and int(m.group(1)) not in fates


def progress_findings(df: pd.DataFrame) -> list[Finding]:
    out = []
    for g in group_progress(df):
        parts = []
        for r, info in g["ranks"].items():
            lc = info["last_completed"]
            parts.append(f"rank {r}: {lc if lc is not None else '-'}")
        out.append(Finding(PROGRESS, INFO,
                           f"{_group_label(g['world'], g['group'], g['desc'])}: last seq completed  " + ", ".join(parts),
                           world=g["world"], group=g["group"], ranks=g["members"],
                           data={"ranks": {str(k): v for k, v in g["ranks"].items()}}))
    return out


# -- entry point ---------------------------------------------------------------------

def diagnose(run) -> list[Finding]:
    """All findings for a loaded ``Run``, most severe first (stable within a severity)."""
    df = run.frame
    if len(df) == 0 or "op" not in df.columns:
        df = df.iloc[0:0]
    df = coverage.judged_frame(df, run.processes)  # bounded traces: what their files can show
    fates = rank_fates(run)
    early = early_processes(run)
    findings: list[Finding] = []
    if len(df) and "group_ranks" in df.columns:
        findings += diagnose_collectives(df, fates, run)
        findings += diagnose_p2p(df)
        findings += diagnose_stragglers(df)
    findings += diagnose_early(early, set(fates))
    findings += diagnose_processes(run, fates, df if len(df) and "group_ranks" in df.columns else df, early)
    findings += diagnose_damage(run)
    findings += diagnose_issues(run, fates)
    findings += diagnose_dumps(run)
    findings += [f for f in (coverage.coverage_finding(run),) if f is not None]
    if len(df) and "group_ranks" in df.columns:
        findings += progress_findings(df)
    findings.sort(key=lambda f: _SEV_ORDER.get(f.severity, 3))
    return findings
