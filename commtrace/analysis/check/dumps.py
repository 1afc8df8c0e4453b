"""Reading the state dumps the watchdog or SIGUSR1 wrote (``*.dump.json``): a finding per dump and a
short summary of each thread's innermost frames.
"""
from __future__ import annotations

import json
import os

from ...trace.rank_ranges import fmt_ranks
from .findings import DUMP, Finding, INFO, _int, _s

def diagnose_dumps(run) -> list[Finding]:
    """One finding per dump reason ("hang", "SIGTERM", "SIGUSR1"): the ranks that wrote
    such dumps, the first dump's path and (details) its summary; ``data["paths"]``
    lists every dump of that reason by rank."""
    by_reason: dict[str, dict] = {}   # reason -> rank (None: a rankless process) -> its dump paths
    for p in run.processes:
        for d in p.get("dumps") or []:
            if not isinstance(d, dict):
                continue
            r = _int(p.get("rank"))
            reason = _s(d.get("reason")) or "?"
            by_reason.setdefault(reason, {}).setdefault(r, []).append(_s(d.get("path")))
    out = []
    for reason, paths in by_reason.items():
        ranks = sorted(r for r in paths if r is not None)
        first = min(paths, key=lambda r: (r is None, r or 0))
        path = paths[first][0]
        n = sum(len(v) for v in paths.values())
        who = f"rank {fmt_ranks(ranks)}" if ranks else "rank None"   # as a rankless process's dump always read
        if n == 1:
            title = f"{who}: state dump ({reason}) {path}"
        else:
            title = f"{who}: {n} state dumps ({reason}), the first {path}"
        f = Finding(DUMP, INFO, title, ranks=ranks,
                    data={"path": path, "reason": reason, "paths": {str(r): v for r, v in paths.items()}})
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
