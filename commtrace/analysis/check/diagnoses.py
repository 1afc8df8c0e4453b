"""The diagnoses: collectives some members never reached, mismatches, stuck and failed ops, unmatched
p2p, stragglers, processes that ended badly, damaged trace data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..bounded_coverage import bounded_processes, coverage_text
from ...trace.rank_ranges import FOLD_SHOWN, fmt_ranks, folded_inline, folded_lines
from ...trace.issues import (ABRUPT as ISSUE_ABRUPT, DAMAGED as ISSUE_DAMAGED, OTHER_RUN, RANKS_MISSING, fold_issues,
                             issue_line)
from ...trace.schema import rank_in_name, stem_of
from ..match import frame_pair_seqs, p2p_pair_codes
from .fates import (EarlyProcess, RankFate, _first_line, distinct_fates, fate_of, rank_label, run_world_names,
                    world_restarts)
from .findings import (
    ABRUPT, DAMAGED, ERROR, EXCEPTION, EXITED, FAILED, Finding, INFO, LOST_RECORD, MISMATCH, MISSING_RANK,
    NOT_ARRIVED, NO_GROUP, P2P_UNMATCHED, PROGRESS, RECOVERED, STRAGGLER, STUCK, TRACE_ISSUE, WARNING, _fmt_age,
    _group_label,
    _int, _s)
from .facts import MISMATCH_SHOWN, GroupFacts, GroupVerdict, RunFacts
from .matching import collective_rows, is_p2p, _compare_at_seq, _fmt_split, _now_ns, _op_desc

STRAGGLER_MIN_OPS = 4             # collectives every member completed
STRAGGLER_MIN_SHARE = 0.6         # share of them where the rank arrived last
STRAGGLER_MIN_LAG_NS = 50_000_000  # median wait it imposed (last arrival - median arrival)


_SIGTERM_EXIT = 128 + 15


def diagnose_early(early: list[EarlyProcess], ranked: set) -> list[Finding]:
    """Processes that ended badly (raised, exited non-zero, killed, trace cut) before any process
    group: info for a helper (no rank, not mp.spawn's) whose trace just ends or that SIGTERM ended.
    Processes numbered alike that ended alike are one finding ("rank 0-1023 raised KeyError ...")."""
    alike: dict[tuple, tuple[str, list[EarlyProcess]]] = {}   # -> (severity, processes)
    # Root causes first: ranks that raised, then ranks torn down, then other processes.
    for e in sorted(early, key=lambda e: (not e.identified, not e.fate.exception, e.label)):
        if e.rank is not None and e.rank in ranked:
            continue  # the rank's own process group trace says more (a restarted rank, ...)
        fate = e.fate
        if not e.identified and fate.complete and fate.how == "signal" and fate.exit_code == _SIGTERM_EXIT:
            sev = INFO  # a helper torn down by its parent (multiprocessing Pool.terminate, DataLoader): routine
        elif fate.complete and fate.how == "skip":
            sev = INFO  # a rank of torch's test harness skipping its test (too few GPUs, ...): not a failure
        elif fate.exception or fate.complete and (fate.how in ("signal", "hang", "exception")
                                                  or fate.exit_code not in (None, 0)):
            sev = ERROR
        elif not fate.complete:
            sev = ERROR if e.identified else INFO  # a helper's trace that just ends: context only
        else:
            continue
        kind = e.numbered()
        exc = fate.exception or {}
        key = ((kind[0], sev, fate.describe(), fate.exit_code, fate.how, exc.get("exc_type"), _s(exc.get("message")),
                _s(exc.get("text"))) if kind else (id(e),))
        alike.setdefault(key, (sev, []))[1].append(e)
    findings = [_early_finding(sev, es) for sev, es in alike.values()]
    if early and not ranked and not findings:   # else those findings say what went wrong
        findings.append(_no_group_at_all(early))
    return findings


def _no_group_at_all(early: list[EarlyProcess]) -> Finding:
    """Why a run whose processes all ended well before any process group has nothing to check (the
    report refuses it and sends the user here): how many processes ran, and how each ended."""
    details = [f"{e.label} {e.fate.describe()}" for e in early[:FOLD_SHOWN]]
    if len(early) > FOLD_SHOWN:
        details.append(f"... and {len(early) - FOLD_SHOWN} more")
    return Finding(NO_GROUP, INFO, f"no process created a process group: {len(early)} process(es) traced, "
                   f"no collective or send/recv to check", details=details,
                   data={"processes": [{"process": e.label, "how": e.fate.how, "exit_code": e.fate.exit_code}
                                       for e in early]})


def _early_finding(sev: str, es: list[EarlyProcess]) -> Finding:
    """The finding for processes that ended alike (``es``: one, or several numbered alike)."""
    e, fate = es[0], es[0].fate
    label = e.label if len(es) == 1 else f"{e.numbered()[0]} {fmt_ranks(x.numbered()[1] for x in es)}"
    # A helper (the parent of mp.spawn, a subprocess) never meant to create a group.
    when = " before any process group existed" if e.identified else ""
    f = Finding(NO_GROUP, sev, f"{label} {fate.describe()}{when}",
                ranks=sorted(x.rank for x in es if x.rank is not None),
                data={"process": label, "files": [p for x in es for p in x.fate.files], "exit_code": fate.exit_code,
                      "how": fate.how})
    if fate.exception:
        f.data.update(exc_type=fate.exception.get("exc_type"), message=fate.exception.get("message"))
        f.details.extend(_traceback_tail(fate.exception))
    return f


def _traceback_tail(exc: dict) -> list[str]:
    text = _s(exc.get("text"))
    return text.rstrip().splitlines()[-12:] if text else []


def diagnose_coverage(run) -> list[Finding]:
    """An info finding about a bounded run: what its files cover (none when no process is bounded)."""
    procs = bounded_processes(run.processes)
    text = coverage_text(run.processes)
    if text is None:
        return []
    details = []
    for p in procs:
        c = p["coverage"]
        bits = []
        if c.get("keep_last"):
            bits.append(f"{c.get('ops_kept', 0):,} ops kept of {c.get('ops_seen') or 0:,} "
                        f"(last {c['keep_last']:,})")
        if c.get("steps"):
            bits.append(f"steps {c['steps']} in full, {c.get('ops_counted', 0):,} ops counted, "
                        f"{c.get('steps_done') or 0:,} steps taken")
        details.append(f"rank {p.get('rank')} ({p.get('file')}): " + "; ".join(bits))
    details.append("collectives a member dropped or only counted are not judged")
    return [Finding("coverage", INFO, f"bounded trace: {text}", details=details,
                    ranks=sorted({int(p["rank"]) for p in procs if isinstance(p.get("rank"), int)}),
                    data={"processes": [{"rank": p.get("rank"), "file": p.get("file"), **p["coverage"]}
                                        for p in procs]})]


def diagnose_damage(run, fates: dict[tuple, RankFate] | None = None, worlds: dict | None = None) -> list[Finding]:
    """Unreadable trace data: an error (the diagnosis may lack it); ranks (of one world) damaged alike
    (equal ``damage_any``: file stems written "*") are one finding, ``data.per_rank`` each one's files;
    with several ``worlds`` it names the world (that of the rank's fate, ``rank_fates``)."""
    world_of = {f: fate.world for fate in (fates or {}).values() for f in fate.files} if worlds and len(worlds) > 1 else {}
    alike: dict[tuple, list[dict]] = {}     # (world, damage of any rank) -> its ranks' processes (in order)
    helpers = []                            # processes without a rank: one finding each
    for p in list(run.processes) + list(getattr(run, "unranked", None) or []):
        if isinstance(p, dict) and p.get("damage"):
            if _int(p.get("rank")) is None:
                helpers.append(p)
            else:
                key = tuple(str(d) for d in p.get("damage_any") or p["damage"])
                alike.setdefault((world_of.get(str(p.get("file"))), key), []).append(p)
    out = []
    for (world, key), ps in alike.items():
        ranks = sorted({_int(p["rank"]) for p in ps})
        first = [str(d) for d in ps[0]["damage"]]
        per_rank: dict = {}
        for p in ps:
            mine = per_rank.setdefault(str(_int(p["rank"])), {"files": [], "damage": []})
            mine["files"].append(p.get("file"))
            mine["damage"].extend(str(d) for d in p["damage"])
        # One file: its own name; several: "*.ops.bin" (each rank's files: data.per_rank).
        what = "; ".join(first if len(ps) == 1 else key)
        out.append(Finding(DAMAGED, ERROR, f"{rank_label(ranks, world, worlds)}: trace damaged: {what}", ranks=ranks,
                           world=world, data={"file": ps[0].get("file"), "damage": first, "per_rank": per_rank}))
    for p in helpers:
        damage = [str(d) for d in p["damage"]]
        out.append(Finding(DAMAGED, ERROR, f"pid {p.get('pid')}: trace damaged: {'; '.join(damage)}",
                           data={"file": p.get("file"), "damage": damage, "per_rank": {}}))
    return out


def diagnose_collectives(df: pd.DataFrame, fates: dict[tuple, RankFate], run, facts: RunFacts,
                         verdicts: dict, names: dict | None = None) -> list[Finding]:
    """Per group: mismatches, lost records, ranks that never arrived, stuck and failed ops. ``facts``:
    the figures over every op; ``verdicts`` ((world, group) -> GroupVerdict, ``facts.classify_frame``)
    name the seqs worth a finding, whose rows ``df`` holds."""
    findings: list[Finding] = []
    coll = collective_rows(df)
    by_group = ({(_s(w), _s(g)): gdf for (w, g), gdf in coll.groupby(["world", "group"], observed=True, sort=False)}
                if len(coll) else {})
    worlds = _group_worlds(facts, names)
    nows: dict = {}     # world -> the latest moment known of it (in-flight ages)
    for (world_s, group_s), g in facts.groups.items():
        v = verdicts.get((world_s, group_s))
        if v is None:
            continue
        gdf = by_group.get((world_s, group_s), coll.iloc[0:0])
        shown = gdf[gdf["seq"].isin(v.seqs()).to_numpy()]
        by_seq = {int(s): sdf for s, sdf in shown.groupby("seq", sort=True)}
        label = _group_label(world_s, group_s, g.desc, worlds)
        if world_s not in nows:
            nows[world_s] = _now_ns(run, facts.t_max, world_s)
        findings += _group_findings(label, world_s, group_s, g, v, by_seq, fates, facts, nows[world_s], names)
    return findings


def _group_findings(glabel, world_s, group_s, g: GroupFacts, v: GroupVerdict, by_seq: dict, fates, facts: RunFacts,
                    now, names: dict | None = None) -> list[Finding]:
    findings: list[Finding] = []
    # Mismatches: every seq where the present ranks disagree (the first few shown).
    for seq in v.mismatch[:MISMATCH_SHOWN]:
        sdf = by_seq[seq].drop_duplicates("rank", keep="last")
        cats = _compare_at_seq(sdf)
        severity = ERROR if any(c != "variant" for c, _ in cats) else WARNING
        op = str(sdf["op"].iloc[0])
        disagree = ", ".join(c for c, _ in cats)
        details = [f"{c}: {_fmt_split(s)}" for c, s in cats] + folded_lines(
            {int(r["rank"]): f"{_op_desc(r)} [{r['status']}] at {_s(r.get('callsite')) or '?'}"
             for _, r in sdf.iterrows()})
        findings.append(Finding(MISMATCH, severity, f"{glabel} seq {seq}: ranks disagree on {disagree} ({op})",
                                details=details, world=world_s, group=group_s, seq=seq, op=op,
                                ranks=sorted(int(r) for r in sdf["rank"]),
                                data={"categories": {c: {str(k): v for k, v in s.items()} for c, s in cats}}))
    if v.n_mismatch > MISMATCH_SHOWN:
        findings.append(Finding(MISMATCH, ERROR, f"{glabel}: {v.n_mismatch - MISMATCH_SHOWN} more mismatched sequence numbers",
                                world=world_s, group=group_s))
    if v.lost:
        seq, lost = v.lost[0]
        findings.append(_lost_record(glabel, world_s, group_s, seq, by_seq[seq], lost, v.lost_seqs, fates,
                                     g.last_entered))
    if v.missing:
        seq, missing = v.missing[0]
        findings.append(_not_arrived(glabel, world_s, group_s, seq, by_seq[seq], missing, facts, fates, now,
                                     later=v.n_missing - 1, names=names))
    # Stuck: everyone entered, someone never finished (not explained by a missing rank).
    # (in_flight ascends: the first seq not a mismatch shown, if before the first missing rank's)
    seq = next((s for s in v.in_flight if s not in v.mismatch[:MISMATCH_SHOWN]), None)
    if seq is not None and (not v.missing or seq < v.missing[0][0]):
        sdf = by_seq[seq]
        waiting = sorted(int(r) for r in sdf.loc[sdf["status"].astype(str) == "in_flight", "rank"])
        row = sdf.iloc[0]
        title = (f"{glabel} seq {seq}: {row['op']} entered by all {len(g.members)} ranks but never finished on "
                 f"rank {fmt_ranks(waiting)}")
        details = [f"op: {_op_desc(row)} at {_s(row.get('callsite')) or '?'}",
                   *folded_lines({r: fate.describe() for r in waiting if (fate := fate_of(fates, world_s, r))})]
        findings.append(Finding(STUCK, ERROR, title, details=details, world=world_s, group=group_s, seq=seq,
                                op=str(row["op"]), ranks=waiting))
    # Failed ops: first failing seq in this group.
    if v.failed:
        seq = v.failed[0]
        sdf = by_seq[seq]
        fr = sdf[(sdf["status"].astype(str) == "failed").to_numpy()]
        row = fr.iloc[0]
        f = Finding(FAILED, ERROR,
                    f"{glabel} seq {seq}: {row['op']} failed on rank {fmt_ranks(fr['rank'])}"
                    + (f" (and {v.n_failed - 1} later op(s))" if v.n_failed > 1 else ""),
                    world=world_s, group=group_s, seq=seq, op=str(row["op"]),
                    ranks=sorted(int(r) for r in fr["rank"]))
        f.details += folded_lines({int(r["rank"]): _first_line(_s(r.get("error")) or "error text not recorded")
                                   for _, r in fr.iterrows()})
        findings.append(f)
    return findings


def _lost_record(glabel, world_s, group_s, seq, sdf, lost, seqs, fates, last_seq) -> Finding:
    """Collectives a rank did reach but whose record is unreadable: the damaged file is the cause."""
    op = str(sdf["op"].iloc[0])
    span = f"seq {seqs[0]}" if len(seqs) == 1 else f"seq {seqs[0]}..{seqs[-1]} ({len(seqs)} sequence numbers)"
    causes = {}
    for r in lost:
        fate = fate_of(fates, world_s, r)
        causes[r] = "; ".join(fate.damage) if fate is not None and fate.damage else "records missing from its trace"
    # One rank: its damage in the title; several: a detail line per equal damage (each names its file).
    cause = f" ({causes[lost[0]]})" if len(lost) == 1 else ""
    title = f"{glabel} {span}: the records of rank {fmt_ranks(lost)} are unreadable{cause}"
    f = Finding(LOST_RECORD, ERROR, title, world=world_s, group=group_s, seq=seq, op=op, ranks=list(lost),
                data={"seqs": list(seqs), "lost": list(lost)})
    if len(lost) > 1:
        f.details += folded_lines(causes)
    f.details += folded_lines({r: f"reached seq {last_seq[r]} of this group, so it did call seq {seq}"
                               for r in lost if last_seq.get(r, 0) > seq}, line=lambda rs, t: f"rank {rs} {t}")
    return f


def _not_arrived(glabel, world_s, group_s, seq, sdf, missing, facts: RunFacts, fates, now, later,
                 names: dict | None = None) -> Finding:
    row = sdf.iloc[0]
    op = str(row["op"])
    entered = sorted(int(r) for r in sdf["rank"])
    st = sdf.set_index("rank")["status"].astype(str)
    waiting = [r for r in entered if st.get(r) == "in_flight"]
    title = (f"{glabel} seq {seq}: {op} {(_s(row.get('shapes')) or '')} entered by rank {fmt_ranks(entered)}; "
             f"rank {fmt_ranks(missing)} never arrived")
    f = Finding(NOT_ARRIVED, ERROR, title.replace("  ", " "), world=world_s, group=group_s, seq=seq, op=op,
                ranks=list(missing),
                data={"entered": entered, "waiting": waiting, "missing": list(missing)})
    f.details.append(f"op: {_op_desc(row)} called at {_s(row.get('callsite')) or '?'}")
    state = {}   # rank -> what it did there (ranks with the same text share one line)
    for _, r in sdf.drop_duplicates("rank", keep="last").iterrows():
        status = str(r["status"])
        age = ""
        if status == "in_flight" and now is not None and _int(r["t_start_ns"]) is not None:
            age = f", waiting at least {_fmt_age(now - int(r['t_start_ns']))}"
        state[int(r["rank"])] = f"{status}{age}"
    f.details += folded_lines(state, line=lambda rs, t: f"rank {rs} entered: {t}")
    story = {}   # missing rank -> where it was last and how it ended
    for m in missing:
        fate = fate_of(fates, world_s, m)
        # its process's last op anywhere (it may be stuck in another group)
        last = facts.last_op(m, fate.worlds if fate is not None else [world_s])
        if last is None:
            where = "no op traced"
        else:
            other = (names or {}).get(_s(last["world"]), last["world"])
            ing = ("" if _s(last["group"]) == group_s and _s(last["world"]) == world_s else f" in group {last['group']}"
                   if _s(last["world"]) == world_s else f" in group {last['group']} of world {other}")
            where = (f"last call{ing} seq {int(last['seq'])} {last['op']} [{last['status']}] at "
                     f"{_s(last.get('callsite')) or '?'}")
        fate_s = fate.describe() if fate is not None else "no usable trace file"
        story[m] = f"{where}; {fate_s}"
        f.data.setdefault("last_callsite", {})[str(m)] = None if last is None else _s(last.get("callsite"))
    f.details += folded_lines(story, line=lambda rs, t: f"rank {rs} never arrived: {t}")
    if later:
        f.details.append(f"{later} later sequence number(s) also lack some ranks (a consequence of this one)")
    return f


# -- point to point ------------------------------------------------------------------

P2P_SHOWN = 10


def _frame_order(r) -> tuple:
    return int(r["t_start_ns"]), int(r["rank"])


def _take_order(r) -> tuple:
    """The order in which sends are taken by recvs from any source: completed ones first."""
    return str(r["status"]) == "in_flight", *_frame_order(r)


@dataclass
class _Sends:
    """Sends of one sender to one receiver that no recv took, in take order: ``n`` exact;
    ``rows`` all of them, or past 2 * P2P_SHOWN the last P2P_SHOWN (those left when the others are
    taken) and the first P2P_SHOWN in frame order (those shown when none is taken)."""
    n: int = 0
    rows: list = field(default_factory=list)

    def add(self, other: "_Sends") -> None:
        self.n += other.n
        rows = sorted(self.rows + other.rows, key=_take_order)
        if len(rows) > 2 * P2P_SHOWN:
            first = {id(r) for r in sorted(rows[:-P2P_SHOWN], key=_frame_order)[:P2P_SHOWN]}
            rows = [r for r in rows[:-P2P_SHOWN] if id(r) in first] + rows[-P2P_SHOWN:]
        self.rows = rows


@dataclass
class OpenP2P:
    """What recvs from any source whose sender is not known (in flight: no ``source`` line yet) leave open
    among some send/recv rows: the sends no recv took (analysis.match's pairs) and the number of those recvs
    (a seq chunk of the run may hold the one and not the other). Two merge into that of their rows
    together; counts exact, rows capped.

    The rule: each such recv takes one send to its rank that has no recv, completed sends first (then by
    start time; which one is not known). Left are the last sends. The rows kept are enough to show the
    first P2P_SHOWN left (of a receiver's sends, the last P2P_SHOWN when more are left)."""
    sends: dict = field(default_factory=dict)      # (world, group, receiver, sender) -> _Sends
    anonymous: dict = field(default_factory=dict)  # (world, group, receiver) -> its recvs whose sender is not known

    def merge(self, other: "OpenP2P") -> None:
        for key, s in other.sends.items():
            self.sends.setdefault(key, _Sends()).add(s)
        for key, n in other.anonymous.items():
            self.anonymous[key] = self.anonymous.get(key, 0) + n

    def left(self) -> list:
        """The sends no recv took, in take order."""
        pools: dict = {}
        for (w, g, receiver, sender), s in self.sends.items():
            pools.setdefault((w, g, receiver), []).append(s)
        sends = []
        for key, ss in pools.items():
            rows = sorted((r for s in ss for r in s.rows), key=_take_order)
            anonymous = self.anonymous.get(key, 0)
            n = sum(s.n for s in ss) - anonymous       # those the anonymous recvs leave: the last ones
            if n > 0:
                whole = len(rows) == sum(s.n for s in ss)
                sends += rows if not anonymous else rows[-n:] if whole else rows[-min(n, P2P_SHOWN):]
        return sends

    def unmatched(self, recvs: list) -> list:
        """``recvs`` (recvs without their send) and the sends left open, in the order shown."""
        return sorted(recvs + self.left(), key=_frame_order)


def p2p_loose_ends(df: pd.DataFrame) -> tuple[list, OpenP2P]:
    """The recvs without their send (analysis.match's pairs: same world, group, tag and pair_seq, peers
    swapped; a recv from any source by the rank it received from), and the OpenP2P of the rest: the sends
    without their recv and the recvs from any source whose sender is not known. A send/recv whose pair_seq
    is not known (trace.p2p_order: a bounded trace dropped some of its peer's) is neither."""
    loose, open_ = [], OpenP2P()
    if len(df) == 0:
        return loose, open_
    rows = df[is_p2p(df["op"])]
    if not len(rows):
        return loose, open_
    code = p2p_pair_codes(rows)
    alone = np.bincount(code)[code] == 1
    root = rows["root"]
    known_peer = root.notna().to_numpy() & (root.fillna(-1).to_numpy(np.int64) >= 0)
    pair = frame_pair_seqs(rows)
    send = (rows["op"] == "send").to_numpy()
    sends = {}
    for i in np.flatnonzero(alone | ~known_peer).tolist():
        r = rows.iloc[i]
        w, g, rank = _s(r["world"]), _s(r["group"]), int(r["rank"])
        if not known_peer[i]:
            if not send[i]:             # a recv from any source still waiting: it takes one of the sends left
                open_.anonymous[(w, g, rank)] = open_.anonymous.get((w, g, rank), 0) + 1
        elif pair[i] <= 0:
            continue
        elif send[i]:
            sends.setdefault((w, g, int(r["root"]), rank), []).append(r)
        else:
            loose.append(r)
    open_.merge(OpenP2P({key: _Sends(len(rs), sorted(rs, key=_take_order)) for key, rs in sends.items()}))
    return loose, open_


def unmatched_p2p(df: pd.DataFrame) -> list:
    """The send/recv rows without their counterpart (same world, group, seq; peers swapped; a recv
    from any source: ``OpenP2P``'s rule), in the order shown."""
    recvs, open_ = p2p_loose_ends(df)
    return open_.unmatched(recvs)




def diagnose_p2p(df: pd.DataFrame, worlds: dict | None = None) -> list[Finding]:
    """A send / recv without its counterpart (``unmatched_p2p``; with several ``worlds``, the rank
    named by its world)."""
    findings = []
    for r in unmatched_p2p(df)[:P2P_SHOWN]:
        st = str(r["status"])
        sev = ERROR if st == "in_flight" else INFO
        peer = _int(r.get("root"))
        what = "recv from" if str(r["op"]) == "recv" else "send to"
        findings.append(Finding(P2P_UNMATCHED, sev,
                                f"{rank_label([int(r['rank'])], _s(r['world']), worlds)} {what} rank {peer} "
                                f"#{int(r['seq'])} ({_s(r.get('shapes'))}) "
                                f"has no matching {'send' if str(r['op']) == 'recv' else 'recv'} [{st}]",
                                details=[f"called at {_s(r.get('callsite')) or '?'}"],
                                world=_s(r["world"]), group=_s(r["group"]), seq=int(r["seq"]), op=str(r["op"]),
                                ranks=[int(r["rank"])]))
    return findings


# -- stragglers -----------------------------------------------------------------------

def diagnose_stragglers(facts: RunFacts, names: dict | None = None) -> list[Finding]:
    """Ranks that arrived last at most of the collectives every member completed, and
    made the others wait long (``facts.stragglers``: facts.straggler_lags per group)."""
    findings, worlds = [], _group_worlds(facts, names)
    for (world, group), s in facts.stragglers.items():
        if s.instances < STRAGGLER_MIN_OPS:
            continue
        for r in s.members:
            lag = s.lags_of(r)
            share = len(lag) / s.instances     # first: the median of no lags is undefined
            if share < STRAGGLER_MIN_SHARE or (med := float(np.median(lag))) < STRAGGLER_MIN_LAG_NS:
                continue
            total = float(lag.sum())
            findings.append(Finding(
                STRAGGLER, WARNING,
                f"{_group_label(world, group, worlds=worlds)}: rank {int(r)} arrived last at {len(lag)} of "
                f"{s.instances} collectives (median wait it caused {_fmt_age(med)}, total {_fmt_age(total)})",
                world=world, group=group, ranks=[int(r)],
                data={"share_last": float(share), "median_lag_ns": med, "total_lag_ns": total}))
    return findings


# -- processes ---------------------------------------------------------------------

def diagnose_processes(run, fates: dict[tuple, RankFate], facts: RunFacts, early=(),
                       worlds: dict | None = None) -> list[Finding]:
    findings = []
    worlds = run_world_names(run, fates, facts) if worlds is None else worlds
    several = len(worlds) > 1
    # Ranks (of one world) that ended the same way (same exception, exit, damage) are one finding
    # naming them all, their last ops folded into its details.
    last_of: dict[tuple, dict[int, str]] = {}   # (world, story) -> rank -> its last op (by first rank)
    fate_at: dict[tuple, RankFate] = {}         # (world, rank) -> its fate
    for fate in distinct_fates(fates):
        r, world = fate.rank, fate.world if several else None
        last = facts.last_op(r, fate.worlds)
        last_s = (f"last op: {last['op']} seq {int(last['seq'])} [{last['status']}] at {_s(last.get('callsite')) or '?'}"
                  if last is not None else "no ops traced")
        fate_at[(world, r)] = fate
        for story in _stories(fate):
            last_of.setdefault((world, story), {})[r] = last_s
    for (world, story), lasts in last_of.items():
        findings.append(_process_finding(story, fate_at[(world, min(lasts))], lasts, world, worlds))
    # Member ranks that wrote nothing: those of the largest world a process gave, and of any group.
    size_of = {str(p.get("file")): s for p in run.processes if (s := _int(p.get("world_size")))}
    expected: dict = {}     # world (None: the one world) -> its ranks
    for fate in distinct_fates(fates):
        size = max((size_of.get(f, 0) for f in fate.files), default=0)
        expected.setdefault(fate.world if several else None, set()).update(range(size))
    for w, ranks in facts.group_ranks:
        expected.setdefault(w if several else None, set()).update(ranks)
    gone = {e.rank for e in early if e.rank is not None} | ({r for _, r in fates} if not several else set())
    for world, want in expected.items():
        missing = sorted(r for r in want - gone if fate_of(fates, world, r) is None)
        findings += _missing_ranks(run, missing, world, worlds, early)
    return findings


def _missing_ranks(run, missing: list[int], world, worlds: dict, early) -> list[Finding]:
    """The findings for ranks of ``world`` that wrote no usable trace."""
    findings = []
    unreadable: dict[int, list[str]] = {}
    for issue in run.issues:
        r = rank_in_name(str(issue.file))     # a file whose header cannot be read has no other
        if r is not None and r in missing:
            unreadable.setdefault(r, []).append(f"{issue.file}: {issue.problem}")
    for r in missing:
        if r in unreadable:
            findings.append(Finding(MISSING_RANK, ERROR, f"{rank_label([r], world, worlds)}: trace file unusable (the "
                                    f"process died before its first flush, < 0.5 s after it started tracing?)",
                                    details=unreadable[r], ranks=[r], world=world))
    rest = [r for r in missing if r not in unreadable]
    if rest:
        f = Finding(MISSING_RANK, ERROR, f"{rank_label(rest, world, worlds)}: no trace file "
                    f"(never started, or died before its first collective)", ranks=rest, world=world)
        f.details.extend(f"maybe {e.label}, which never created a process group" for e in early
                         if e.rank is None and e.identified)
        findings.append(f)
    return findings


def _stories(fate: RankFate) -> list[tuple]:
    """The process findings a rank's end calls for, as keys equal for ranks that ended alike."""
    out = []
    exc = fate.exception
    if exc:
        out.append((EXCEPTION, exc.get("exc_type"), _s(exc.get("message")), _s(exc.get("text"))))
    elif fate.complete and (fate.how in ("signal", "hang", "skip") or fate.exit_code not in (None, 0)):
        out.append((EXITED, fate.describe(), fate.exit_code, fate.how))
    if not fate.complete:
        out.append((ABRUPT, fate.describe(), tuple(fate.issues)))
    return out


def _process_finding(story: tuple, fate: RankFate, lasts: dict[int, str], world=None,
                     worlds: dict | None = None) -> Finding:
    """The finding of ``story`` for the ranks in ``lasts`` (rank -> its last op) of ``world`` (None:
    the one world), ``fate`` the first one's (equal in what the finding shows)."""
    ranks = sorted(lasts)
    who = rank_label(ranks, world, worlds)
    texts = set(lasts.values())
    last_lines = list(texts) if len(texts) == 1 else folded_lines(lasts)   # one rank: as it always read
    if story[0] == EXCEPTION:
        exc = fate.exception
        title = f"{who} raised {exc.get('exc_type')}: {_first_line(exc.get('message'))}"
        return Finding(EXCEPTION, ERROR, title, details=[*last_lines, *_traceback_tail(exc)], ranks=ranks, world=world,
                       data={"exc_type": exc.get("exc_type"), "message": exc.get("message")})
    if story[0] == EXITED:
        # torch's test harness skipping a test: not a failure; a launcher ending a rank whose script
        # had ended well (another rank failed) while commtrace finished the trace: not this rank's failure
        sev = INFO if fate.how == "skip" else WARNING if fate.script_exit_code == 0 else ERROR
        return Finding(EXITED, sev, f"{who} {fate.describe()}", details=last_lines, ranks=ranks, world=world,
                       data={"exit_code": fate.exit_code, "how": fate.how})
    return Finding(ABRUPT, ERROR, f"{who}: {fate.describe()}", details=[*last_lines, *fate.issues], ranks=ranks,
                   world=world, data={"issues": fate.issues})


# Reader issue kinds another finding tells: damage (diagnose_damage), a trace that ends
# abruptly (the rank's ``abrupt`` finding), ranks without a trace file (``missing_rank``).
_TOLD_ELSEWHERE = (ISSUE_DAMAGED, ISSUE_ABRUPT, RANKS_MISSING)


def diagnose_issues(run, fates: dict[tuple, RankFate]) -> list[Finding]:
    """Reader issues not already explained by another finding; one problem (kind and text)
    in several ranks' files is one finding naming them (``trace.issues.fold_issues``)."""
    # Told in a rank's findings: issues with a ranked process's files (rank_fates), or with the
    # file of a rank that has no readable trace (missing_rank). Another run's file, left out, is no
    # rank of this run's: always told.
    told = {stem_of(f) for fate in fates.values() for f in fate.files}
    ranked = {r for _, r in fates}
    left = [i for i in run.issues if getattr(i, "kind", None) == OTHER_RUN or (
            getattr(i, "kind", None) not in _TOLD_ELSEWHERE and stem_of(str(getattr(i, "file", ""))) not in told
            and ((r := rank_in_name(str(getattr(i, "file", "")))) is None or r in ranked))]
    out = []
    for alike in fold_issues(left):
        f = Finding(TRACE_ISSUE, WARNING, issue_line(alike))
        if len(alike) > 1:       # several ranks' files
            for i in alike:
                f.data.setdefault("files", {}).setdefault(str(i.rank), []).append(str(i.file))
            f.ranks = sorted({i.rank for i in alike})
        out.append(f)
    return out


def _group_worlds(facts: RunFacts, names: dict | None) -> dict:
    """The worlds the run's groups belong to, id -> name (``names``: fates.world_names; group labels
    name the world when several); the processes' worlds may be more (fates.run_world_names: a rank
    that wrote no op is in no group)."""
    return {w: (names or {}).get(w, w) for w, _ in facts.groups}


def restart_findings(run, fates: dict[tuple, RankFate], worlds: dict) -> list[Finding]:
    """A torchrun job that restarted (``--max-restarts``): when its last attempt's world ended well on
    every rank, one finding says so, for the errors of the earlier attempts are then ones it recovered from."""
    restarts = {w: n for w, n in world_restarts(run.processes).items() if n}
    if not restarts:
        return []
    last = max(restarts, key=lambda w: restarts[w])
    ranks = sorted(r for w, r in fates if w == last)
    ended_well = ranks and all(f.complete and not f.exception and f.how in (None, "exit") and f.exit_code in (None, 0)
                               for (w, _), f in fates.items() if w == last)
    missing = any(getattr(i, "kind", None) == RANKS_MISSING and getattr(i, "world", None) == last for i in run.issues)
    if not ended_well or missing:
        return []
    return [Finding(RECOVERED, INFO, f"world {worlds.get(last, last)} ended well on every rank "
                    f"({rank_label(ranks)}): torchrun's restart recovered from the earlier attempts' failures",
                    world=last, ranks=ranks, data={"restart": restarts[last]})]


def progress_findings(facts: RunFacts, names: dict | None = None) -> list[Finding]:
    """Per (world, group): per member its last seq completed / entered and the seqs in flight."""
    out, worlds = [], _group_worlds(facts, names)
    for (world, group), g in facts.groups.items():
        per_rank = {r: {"last_completed": g.last_completed.get(r), "last_entered": g.last_entered.get(r),
                        "in_flight": list(g.in_flight.get(r, []))} for r in g.members}
        last = {r: "-" if p["last_completed"] is None else str(p["last_completed"])
                for r, p in per_rank.items()}
        label = _group_label(world, group, g.desc, worlds)
        out.append(Finding(PROGRESS, INFO, f"{label}: last seq completed: " + folded_inline(last),
                           world=world, group=group, ranks=g.members,
                           data={"ranks": {str(r): p for r, p in per_rank.items()}}))
    return out
