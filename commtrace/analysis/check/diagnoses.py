"""The diagnoses: collectives some members never reached, mismatches, stuck and failed ops, unmatched
p2p, stragglers, processes that ended badly, damaged trace data.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .fates import EarlyProcess, RankFate, _first_line, _world_sizes, rank_is_missing
from .findings import (
    ABRUPT, DAMAGED, ERROR, EXCEPTION, EXITED, FAILED, Finding, INFO, LOST_RECORD, MISMATCH, MISSING_RANK,
    NOT_ARRIVED, NO_GROUP, P2P_UNMATCHED, PROGRESS, STRAGGLER, STUCK, TRACE_ISSUE, WARNING, _fmt_age, _fmt_ranks,
    _group_label, _int, _s, parse_ranks)
from .matching import (
    _P2P, _collectives, _compare_at_seq, _fmt_split, _group_members, _last_op_of, _now_ns, _op_desc,
    group_progress)

STRAGGLER_MIN_OPS = 4             # collectives every member completed
STRAGGLER_MIN_SHARE = 0.6         # share of them where the rank arrived last
STRAGGLER_MIN_LAG_NS = 50_000_000  # median wait it imposed (last arrival - median arrival)


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
