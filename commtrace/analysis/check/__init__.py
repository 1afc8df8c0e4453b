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

Where the pieces are: ``findings`` (Finding, kinds, severities, exit_code),
``matching`` (a collective across its group's members: what each ran at a seq,
how far each got), ``facts`` (what the diagnoses need from every op, mergeable
over seq chunks: ``RunFacts``, ``GroupVerdict``), ``fates`` (how each rank and
process ended), ``diagnoses`` (every diagnosis over those), ``dumps`` (reading
watchdog / SIGUSR1 state dumps); ``diagnose_reduced`` runs them all on facts and a
frame of just the rows they name (``commtrace check``'s engine, which reads the run
per rank and per seq chunk: ``analysis.partitioned.check_map.check_run``), ``diagnose``
on the frame of a run already loaded (``reader.load_run``).
"""
from __future__ import annotations

from .. import bounded_coverage
from .coverage_finding import coverage_finding
from .diagnoses import (  # noqa: F401  (the package's API: one import for every piece)
    diagnose_collectives, diagnose_damage, diagnose_early, diagnose_issues, diagnose_p2p, diagnose_processes,
    diagnose_stragglers, group_progress, progress_findings, unmatched_p2p)
from .dumps import add_dumped_positions, diagnose_dumps, dump_summary  # noqa: F401
from .fates import EarlyProcess, RankFate, early_processes, rank_fates  # noqa: F401
from .findings import (  # noqa: F401
    ABRUPT, DAMAGED, DUMP, ERROR, EXCEPTION, EXITED, FAILED, INFO, LOST_RECORD, MISMATCH, MISSING_RANK, NO_GROUP,
    NOT_ARRIVED, P2P_UNMATCHED, PROGRESS, STRAGGLER, STUCK, TRACE_ISSUE, WARNING, _SEV_ORDER, Finding, exit_code,
    root_cause_first)
from .facts import GroupVerdict, RunFacts, classify_group, frame_facts  # noqa: F401

# -- entry point ---------------------------------------------------------------------

def diagnose(run) -> list[Finding]:
    """All findings for a loaded ``Run``, most severe first, root cause first among the
    errors (``root_cause_first``)."""
    df = run.frame
    if len(df) == 0 or "op" not in df.columns or "group_ranks" not in df.columns:
        df = df.iloc[0:0]
    df = bounded_coverage.judged_frame(df, run.processes)  # bounded traces: what their files can show
    return diagnose_reduced(run, df, frame_facts(df))


def diagnose_reduced(run, df, facts: RunFacts, verdicts: dict | None = None) -> list[Finding]:
    """The findings from ``facts`` (figures over every op) and ``df``: every op (``diagnose``),
    or -- with ``verdicts`` -- only the rows of the collectives the verdicts name and the
    unmatched send/recv shown (analysis.partitioned.check_map)."""
    fates = rank_fates(run)
    early = early_processes(run)
    findings: list[Finding] = []
    if facts.has_ops:
        findings += diagnose_collectives(df, fates, run, facts, verdicts)
        findings += diagnose_p2p(df)
        findings += diagnose_stragglers(facts)
    findings += diagnose_early(early, set(fates))
    findings += diagnose_processes(run, fates, facts, early)
    findings += diagnose_damage(run)
    findings += diagnose_issues(run, fates)
    findings += diagnose_dumps(run)
    findings += [f for f in (coverage_finding(run),) if f is not None]
    if facts.has_ops:
        findings += progress_findings(facts)
    add_dumped_positions(findings, run)
    return root_cause_first(findings)
