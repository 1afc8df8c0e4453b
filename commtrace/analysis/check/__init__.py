"""Diagnose hangs, desyncs, crashes and stragglers from a loaded run (``commtrace check``).

Pure functions over ``Run``; ``diagnose(run)`` returns ``Finding``s, ``render.check_text`` draws them.
Matching follows PyTorch's Flight Recorder: the same collective has the same (world, group, seq) on
every member; at one seq the op, sizes, dtype, reduce op and root must agree, and a member without a
record of a seq others entered never arrived. Send/recv (seq per (op, peer)) are matched pairwise and
reported as info unless still in flight. Severities: ``error`` (hang, desync, crash, lost data),
``warning`` (straggler, variant mismatch), ``info`` (context); ``exit_code`` maps them to 0/1.

``diagnose`` runs the diagnoses on a run already loaded (``reader.load_run``), ``diagnose_reduced`` on
the facts and the rows they name (the partitioned engine: ``analysis.partitioned.check_map``).
"""
from __future__ import annotations

from .. import bounded_coverage
from .diagnoses import (  # noqa: F401  (the package's API: one import for every piece)
    diagnose_collectives, diagnose_coverage, diagnose_damage, diagnose_early, diagnose_issues, diagnose_p2p,
    diagnose_processes, diagnose_stragglers, OpenP2P, P2P_SHOWN, p2p_loose_ends, progress_findings, restart_findings,
    unmatched_p2p)
from .dumps import add_dumped_positions, diagnose_dumps
from .fates import early_processes, rank_fates, run_world_names
from .findings import (  # noqa: F401
    ABRUPT, DAMAGED, DUMP, ERROR, EXCEPTION, EXITED, FAILED, INFO, LOST_RECORD, MISMATCH, MISSING_RANK, NO_GROUP,
    NOT_ARRIVED, P2P_UNMATCHED, PROGRESS, RECOVERED, STRAGGLER, STUCK, TRACE_ISSUE, WARNING, Finding, exit_code,
    root_cause_first)
from .facts import GroupVerdict, RunFacts, classify_frame, classify_group, frame_facts  # noqa: F401


def diagnose(run) -> list[Finding]:
    """All findings for a loaded ``Run``, most severe first, root cause first among the
    errors (``root_cause_first``)."""
    df = run.frame
    if len(df) == 0 or "op" not in df.columns or "group_ranks" not in df.columns:
        df = df.iloc[0:0]
    df = bounded_coverage.judged_frame(df, run.processes)  # bounded traces: what their files can show
    facts = frame_facts(df)
    verdicts, _ = classify_frame(df, {k: g.members for k, g in facts.groups.items()},
                                 {k: g.last_entered for k, g in facts.groups.items()}, rank_fates(run))
    return diagnose_reduced(run, df, facts, verdicts)


def diagnose_reduced(run, df, facts: RunFacts, verdicts: dict) -> list[Finding]:
    """The findings from ``facts`` (figures over every op), ``verdicts`` and ``df``: every op
    (``diagnose``), or only the rows of the collectives the verdicts name and the unmatched
    send/recv shown (analysis.partitioned.check_map)."""
    fates = rank_fates(run)
    early = early_processes(run)
    worlds = run_world_names(run, fates, facts)
    findings: list[Finding] = []
    if facts.has_ops:
        findings += diagnose_collectives(df, fates, run, facts, verdicts, worlds)
        findings += diagnose_p2p(df, worlds)
        findings += diagnose_stragglers(facts, worlds)
    findings += diagnose_early(early, {r for _, r in fates})
    findings += diagnose_processes(run, fates, facts, early, worlds)
    findings += diagnose_damage(run, fates, worlds)
    findings += diagnose_issues(run, fates)
    findings += diagnose_dumps(run)
    findings += diagnose_coverage(run)
    findings += restart_findings(run, fates, worlds)
    if facts.has_ops:
        findings += progress_findings(facts, worlds)
    add_dumped_positions(findings, run)
    return root_cause_first(findings)
