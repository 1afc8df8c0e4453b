"""The report banner's numbers (``analysis.run_info``) from per-rank parts.

Each rank task (``rank_map``) keeps what the banner needs of its rank: its
processes' summaries (with their clock alignment), the first op start and last
op end, per trace file the time its records cover (bounded traces share over
that), failed and never-completed ops, bytes. ``run_info_of`` folds them with
each rank's communication time into the banner's dict (``run_info.info_of`` does
the arithmetic)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...trace import schema
from ..bounded_coverage import bounded_processes
from ..run_info import info_of

# Summary fields the banner never reads and that grow with the run (one entry per mark / dump).
_LEFT_OUT = ("marks", "dumps")


@dataclass
class RankFacts:
    rank: int
    processes: list                     # reader summaries of the rank's processes (less _LEFT_OUT)
    first_start: int | None             # its first op start (rank 0's clock)
    last_end: int | None                # its last op end
    failed: int
    in_flight: int
    nbytes: int
    file_spans: dict = field(default_factory=dict)   # stem -> last op end - first op start (bounded only)


def rank_facts(rank: int, procs: list, ops) -> RankFacts:
    """``procs``: the rank's processes, their clocks described (reader.describe_clocks);
    ``ops``: its rank_ops.RankOps shown (the window's), or None (no ops)."""
    summaries = [{k: v for k, v in p.summary().items() if k not in _LEFT_OUT} for p in procs if p.rank is not None]
    status = ops.status if ops is not None else np.zeros(0, np.uint8)
    failed = int((status == schema.STATUS_FAILED).sum())
    in_flight = int((status == schema.STATUS_IN_FLIGHT).sum())
    if ops is None or not len(ops.arrays.start):
        return RankFacts(rank, summaries, None, None, failed, in_flight, 0)
    a = ops.arrays
    spans = {}
    if bounded_processes(summaries):
        lo = np.full(len(ops.stems), np.iinfo(np.int64).max)
        hi = np.full(len(ops.stems), np.iinfo(np.int64).min)
        np.minimum.at(lo, ops.proc, a.start)
        np.maximum.at(hi, ops.proc, a.end)
        spans = {s: int(h - low) for s, low, h in zip(ops.stems, lo, hi) if h >= low}
    return RankFacts(rank, summaries, int(a.start.min()), int(a.end.max()), failed, in_flight, int(a.nbytes.sum()),
                     spans)


def processes_of(facts: list[RankFacts]) -> list[dict]:
    """Every rank's process summaries in file name order (as ``reader.load_run`` lists them)."""
    return sorted((p for f in facts for p in f.processes), key=lambda p: str(p.get("file")))


def run_info_of(path: str, run_id, facts: list[RankFacts], comm_ns_per_rank: dict, ops: int, t0: int | None,
                window_ns_per_rank: dict | None = None) -> dict:
    """The banner's numbers (``run_info.info_of``) from every rank's facts (of the ops shown);
    ``t0``: the run's first op; ``window_ns_per_rank``: each rank's window length (None: the whole run)."""
    procs = processes_of(facts)
    starts = [f.first_start for f in facts if f.first_start is not None]
    spans = {s: v for f in facts for s, v in f.file_spans.items()}
    return info_of(path, run_id, procs, t0=t0, first_start=min(starts) if starts else None,
                   last_end={f.rank: f.last_end for f in facts if f.last_end is not None},
                   comm_ns_per_rank=comm_ns_per_rank,
                   spans_of_file=spans, ops=ops, nbytes=sum(f.nbytes for f in facts),
                   failed=sum(f.failed for f in facts), in_flight=sum(f.in_flight for f in facts),
                   window_ns_per_rank=window_ns_per_rank)
