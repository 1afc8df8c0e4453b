"""Problems with a run's trace files, as fields (``TraceIssue``), and their folding: one
problem in many ranks' files is one line naming the ranks, decided by the fields
(kind, problem, rank), never by parsing the text (the report's warnings and
``commtrace check``'s ``trace_issue`` findings both fold this way)."""
from __future__ import annotations

from dataclasses import dataclass

from .rank_ranges import fmt_ranks

# TraceIssue.kind: what an issue says about the run (stable strings; check and the
# report's warnings sort and fold issues by them, never by their text).
DAMAGED = "damaged"              # data on disk that cannot be read (not a process that died)
TRUNCATED = "truncated"          # a records file ends mid-record (the process died mid-write, or a full disk)
ABRUPT = "abrupt"                # no end record: the process was killed, crashed, or still runs
UNUSABLE = "unusable"            # the file cannot be read at all (unreadable, not a trace, unknown version)
RANKS_MISSING = "ranks_missing"  # ranks of a world with no trace file (``world``, ``ranks``)
COVERAGE = "coverage"            # a bounded trace's coverage file is ignored
OTHER_RUN = "other_run"          # a file of another run, skipped (reader.check_run_ids)


@dataclass(frozen=True)
class TraceIssue:
    """One problem with the trace files, as fields: ``__str__`` is its one warning line
    ("FILE (rank R): PROBLEM"; "world W: PROBLEM" for a world's missing ranks)."""
    file: str                  # the file it is about ("" when it is about a world)
    problem: str               # what is wrong, one phrase (without the file name)
    rank: int | None = None    # the rank whose file it is, when known
    kind: str | None = None    # one of the kinds above
    world: str | None = None   # RANKS_MISSING: the world's id
    ranks: tuple = ()          # RANKS_MISSING: the ranks with no trace file

    def __str__(self) -> str:
        where = f"world {self.world}" if self.kind == RANKS_MISSING else self.file
        who = f" (rank {self.rank})" if self.rank is not None else ""
        return f"{where}{who}: {self.problem}"


def fold_issues(issues) -> list[list[TraceIssue]]:
    """The issues as lines to print, in order: each issue about a rank's file together
    with every later rank file's issue of the same kind and problem (one line naming
    their ranks); any other issue alone."""
    alike: dict[tuple, list] = {}   # (kind, problem) -> the issues with rank files that have it
    out = []
    for i in issues:
        if getattr(i, "rank", None) is None or i.kind == RANKS_MISSING:   # not about one rank's file
            out.append([i])
        elif (i.kind, i.problem) in alike:
            alike[(i.kind, i.problem)].append(i)     # told on the line of the first file that has it
        else:
            out.append(alike.setdefault((i.kind, i.problem), [i]))
    return out


def issue_line(alike: list[TraceIssue]) -> str:
    """The line of a group of ``fold_issues``: as ``str(issue)`` for one file, else "rank
    3,512-1023 (513 files): PROBLEM"."""
    first = alike[0]
    if len(alike) == 1:
        return str(first)
    return f"rank {fmt_ranks(i.rank for i in alike)} ({len(alike)} files): {first.problem}"
