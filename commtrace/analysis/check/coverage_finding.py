"""check's info finding about a bounded run: what its files cover (``analysis.bounded_coverage``)."""
from __future__ import annotations

from ..bounded_coverage import bounded_processes, coverage_text
from .findings import INFO, Finding


def coverage_finding(run):
    """check's info finding about a bounded run (None when no process is bounded)."""
    procs = bounded_processes(run.processes)
    text = coverage_text(run.processes)
    if text is None:
        return None
    details = []
    for p in procs:
        c = p["coverage"]
        bits = []
        if c.get("keep_last"):
            bits.append(f"{c.get('ops_kept', 0):,} ops kept of {c.get('ops_seen') or 0:,} (last {c['keep_last']:,})")
        if c.get("steps"):
            bits.append(f"steps {c['steps']} in full, {c.get('ops_counted', 0):,} ops counted, "
                        f"{c.get('steps_done') or 0:,} steps taken")
        details.append(f"rank {p.get('rank')} ({p.get('file')}): " + "; ".join(bits))
    details.append("collectives a member dropped or only counted are not judged")
    return Finding("coverage", INFO, f"bounded trace: {text}", details=details,
                   ranks=sorted({int(p["rank"]) for p in procs if isinstance(p.get("rank"), int)}),
                   data={"processes": [{"rank": p.get("rank"), "file": p.get("file"), **p["coverage"]}
                                       for p in procs]})
