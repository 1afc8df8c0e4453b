"""Reading the state dumps the watchdog or SIGUSR1 wrote (``*.dump.json``): a finding per dump and a
short summary of each thread's innermost frames.
"""
from __future__ import annotations

import json
import os
import re

from ...trace.rank_ranges import folded_lines
from .fates import process_worlds, rank_label, run_worlds, world_names
from .findings import DUMP, EXITED, NOT_ARRIVED, Finding, INFO, _int, _s

def diagnose_dumps(run) -> list[Finding]:
    """One finding per dump reason ("hang", "SIGTERM", "SIGUSR1") and world (when the run has several):
    its ranks, the first dump's path and summary; ``data["paths"]``: every dump of that reason by rank."""
    by_reason: dict[tuple, dict] = {}   # (reason, world) -> rank (None: a rankless process) -> its dump paths
    worlds = world_names(run.processes, run_worlds(run))
    for p in run.processes:
        for d in p.get("dumps") or []:
            if not isinstance(d, dict):
                continue
            r = _int(p.get("rank"))
            reason = _s(d.get("reason")) or "?"
            world = (process_worlds(p) or [None])[0] if len(worlds) > 1 else None
            by_reason.setdefault((reason, world), {}).setdefault(r, []).append(_s(d.get("path")))
    out = []
    for (reason, world), paths in by_reason.items():
        ranks = sorted(r for r in paths if r is not None)
        first = min(paths, key=lambda r: (r is None, r or 0))
        path = paths[first][0]
        n = sum(len(v) for v in paths.values())
        # "rank None": as a rankless process's dump always read
        who = rank_label(ranks, world, worlds) if ranks else "rank None"
        title = (f"{who}: state dump ({reason}) {path}" if n == 1
                 else f"{who}: {n} state dumps ({reason}), the first {path}")
        f = Finding(DUMP, INFO, title, ranks=ranks, world=world,
                    data={"path": path, "reason": reason, "paths": {str(r): v for r, v in paths.items()}})
        f.details.extend(dump_summary(path, run.path))
        out.append(f)
    return out


_OWN_FRAMES = (os.path.join("capture", "watchdog.py"), os.path.join("capture", "activate.py"))
# Frames of libraries and of Python itself: a rank's position is the innermost frame of its program.
_LIBRARY_PARTS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep, os.sep + "commtrace" + os.sep)
_STDLIB = re.compile(r"[/\\]lib(64)?[/\\]python3[^/\\]*[/\\]")   # .../lib/python3.11/ctypes/__init__.py


def _read_dump(path: str | None, run_dir: str | None):
    """The dump's JSON object, None without one, or a string saying why a named one is unusable."""
    if not path:
        return None
    cand = path if os.path.isabs(path) else os.path.join(run_dir or "", path)
    if not os.path.isfile(cand) and run_dir:
        cand = os.path.join(run_dir, os.path.basename(path))
    try:
        with open(cand, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > 16 * 1024 * 1024:
                return "(dump too large to summarize)"
            obj = json.loads(fh.read())
    except (OSError, ValueError):
        return "(dump file unreadable)"
    return obj if isinstance(obj, dict) else None


def _main_frames(obj: dict) -> list[dict]:
    """The main thread's frames, outermost first, without commtrace's own dump machinery."""
    for th in obj.get("threads") or []:
        if isinstance(th, dict) and th.get("name") == "MainThread":
            return [fr for fr in th.get("frames") or [] if isinstance(fr, dict)
                    and not str(fr.get("file", "")).endswith(_OWN_FRAMES)]
    return []


def _is_program(frame: dict) -> bool:
    f = str(frame.get("file", ""))
    return not (f.startswith("<") or any(part in f for part in _LIBRARY_PARTS) or _STDLIB.search(f))


def dumped_position(run, rank: int, world=None) -> str | None:
    """Where ``rank`` (of ``world``, when given)'s program was in its last state dump, as "train.py:10
    time.sleep(40) (SIGTERM dump)": the innermost frame of its main thread outside libraries (else the
    innermost); None: no dump."""
    dumps = [d for p in run.processes if _int(p.get("rank")) == rank
             and (world is None or not (ws := process_worlds(p)) or world in ws)
             for d in (p.get("dumps") or []) if isinstance(d, dict)]
    if not dumps:
        return None
    last = dumps[-1]
    obj = _read_dump(_s(last.get("path")), run.path)
    if not isinstance(obj, dict):
        return None
    frames = _main_frames(obj)
    mine = [fr for fr in frames if _is_program(fr)] or frames
    if not mine:
        return None
    fr = mine[-1]
    code = str(fr.get("code") or "").split("#")[0].strip()
    return (f"{os.path.basename(str(fr.get('file')))}:{fr.get('line')}" + (f" {code}" if code else "")
            + f" ({_s(last.get('reason')) or '?'} dump)")


def add_dumped_positions(findings: list[Finding], run) -> None:
    """Each rank that never arrived, or that a signal ended: where its last state dump shows it (a
    detail line and ``data["dumped_at"]``), e.g. busy in ``time.sleep`` while the others waited, or
    in the call that crashed (a fatal signal dumps before the process dies)."""
    for f in findings:
        if f.kind == NOT_ARRIVED:
            ranks = f.data.get("missing") or []
        elif f.kind == EXITED and f.data.get("how") == "signal":
            ranks = f.ranks
        else:
            continue
        at = {r: pos for r in ranks if (pos := dumped_position(run, r, f.world)) is not None}
        if at:
            f.data["dumped_at"] = {str(r): pos for r, pos in at.items()}
            f.details += folded_lines(at, line=lambda rs, t: f"rank {rs} was at {t}")


def dump_summary(path: str | None, run_dir: str | None = None, max_frames: int = 4) -> list[str]:
    """A few lines from a watchdog dump: in-flight ops and the innermost user frames."""
    obj = _read_dump(path, run_dir)
    if not isinstance(obj, dict):
        return [] if obj is None else [obj]
    lines = []
    for op in (obj.get("in_flight") or [])[:5]:
        if isinstance(op, dict):
            lines.append(f"in flight: {op.get('op')} group {op.get('group')} seq {op.get('seq')} "
                         f"{op.get('shapes')} for {op.get('age_s')} s at {op.get('callsite')}")
    for fr in _main_frames(obj)[-max_frames:]:
        lines.append(f"  {fr.get('file')}:{fr.get('line')} in {fr.get('function')}")
    return lines
