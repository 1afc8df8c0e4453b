"""Reading bounded-mode traces: ring segments (``<file>.1`` then ``<file>``) and
``<stem>.coverage.json`` (what a process saw, wrote and counted). Untrusted: every field
type-checked, anything unusable a problem string, never an exception.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from . import schema
from .schema import int_or_none, list_or_empty

MAX_COVERAGE_BYTES = 64 * 1024 * 1024   # a coverage file is a few KB; refuse absurd ones

COUNT_COLUMNS = ["rank", "world", "group", "op", "ops", "bytes", "time_ns", "time_unknown", "file"]


def segment_paths(path: str) -> list[str]:
    """The files of one record file, oldest first (the previous ring segment, if any)."""
    prev = path + schema.PREVIOUS_SEGMENT
    return [prev, path] if os.path.exists(prev) else [path]


def read_segments(path: str, dtype, record_size: int) -> tuple[np.ndarray | None, list[tuple[str, int]]]:
    """(records of every segment in order, None without any; [(file name, trailing bytes)] of those cut)."""
    parts, torn = [], []
    for p in segment_paths(path):
        try:
            size = os.path.getsize(p)
        except OSError:
            continue  # the current segment is briefly absent while the ring rotates
        if size % record_size:
            torn.append((os.path.basename(p), size % record_size))
        with open(p, "rb") as f:
            parts.append(np.fromfile(f, dtype=dtype, count=size // record_size))
    if not parts:
        return None, torn
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), torn


def options(header: dict) -> dict | None:
    """The header's ``bounded`` options, type-checked (None: not a bounded process)."""
    b = header.get("bounded")
    if not isinstance(b, dict):
        return None
    keep = b.get("keep_last")
    steps = b.get("steps")
    out = {"keep_last": keep if (int_or_none(keep) or 0) > 0 else None,
           "steps": steps if isinstance(steps, str) and len(steps) < 64 else None}
    return out if out["keep_last"] or out["steps"] else None


def keep_last_records(rec: np.ndarray, keep_last: int | None) -> np.ndarray:
    """The last ``keep_last`` ops (file order kept), what ``--keep-last N`` promises whatever
    remains of the older segment. By call time: an op that ran over about a second has its
    final record after ops called later (docs/trace-format.md)."""
    if keep_last is None or len(rec) <= keep_last:
        return rec
    by_call = np.lexsort((rec["seq"], rec["t_call"]))
    return rec[np.sort(by_call[len(rec) - keep_last:], kind="stable")]


def spans_covered(spans: np.ndarray, cov: dict | None) -> np.ndarray:
    """A ring process's compute spans that begin at or after its first kept op
    (older ones would show steps whose ops are gone), otherwise all of them."""
    if not cov or not cov.get("ops_dropped") or cov.get("first_kept_t_mono_ns") is None or not len(spans):
        return spans
    return spans[spans["t_begin"] >= cov["first_kept_t_mono_ns"]]


def coverage_path(meta_path: str) -> str:
    """The coverage file of the process whose meta file is ``meta_path``."""
    return meta_path[: -len(schema.META_SUFFIX)] + schema.COVERAGE_SUFFIX


def read_coverage(meta_path: str) -> tuple[dict | None, str | None]:
    """(the coverage document or None, a phrase saying what is wrong with it or None)."""
    path = coverage_path(meta_path)
    try:
        size = os.path.getsize(path)
    except OSError:
        return None, None
    if size > MAX_COVERAGE_BYTES:
        return None, f"{size} bytes, more than any coverage file; ignored"
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError, UnicodeDecodeError):
        return None, "not JSON; ignored"
    if not isinstance(doc, dict) or doc.get("type") != schema.COVERAGE_TYPE:
        return None, "not a commtrace coverage file; ignored"
    return doc, None


def describe(opts: dict, doc: dict | None, groups: dict, records: np.ndarray) -> dict:
    """What one bounded process's files cover (``Run.processes[i]["coverage"]``); ``records``: as
    read (deduplicated, ``keep_last`` applied); counts name their group's world id and name."""
    final = records["status"] != schema.STATUS_IN_FLIGHT if len(records) else np.zeros(0, dtype=bool)
    kept = int(final.sum())
    doc = doc or {}
    written = _count(doc.get("ops_written"))
    out = {
        "keep_last": opts.get("keep_last"), "steps": opts.get("steps"),
        "ops_seen": _count(doc.get("ops_seen")),          # ops that finished (None: no coverage file)
        "ops_written": written,                           # of them written in full
        "ops_kept": kept,                                 # of them in the files now
        "ops_dropped": None if written is None else max(0, written - kept),  # written, then overwritten (ring)
        "first_kept_t_mono_ns": int(records["t_call"].min()) if len(records) else None,
        "spans_seen": _count(doc.get("spans_seen")), "spans_written": _count(doc.get("spans_written")),
        "steps_done": _count(doc.get("steps_done")),
        "t_mono_ns": _count(doc.get("t_mono_ns")),
        "max_seq": [], "counts": [], "ops_counted": 0,
    }
    for item in list_or_empty(doc.get("max_seq")):
        if isinstance(item, list) and len(item) == 2 and all(int_or_none(v) is not None for v in item):
            g = groups.get(item[0])
            if isinstance(g, dict):
                out["max_seq"].append([_str(g.get("world_id")), _str(g.get("name")), item[1]])
    for c in list_or_empty(doc.get("counts")):
        if not isinstance(c, dict) or int_or_none(c.get("group")) is None:
            continue
        g = groups.get(c["group"])
        g = g if isinstance(g, dict) else {}
        n = _count(c.get("ops"))
        if not n:
            continue
        out["counts"].append({"world": _str(g.get("world_id")), "group": _str(g.get("name")),
                              "op": _str(c.get("op")), "ops": n, "bytes": _count(c.get("bytes")) or 0,
                              "time_ns": _count(c.get("time_ns")) or 0,
                              "time_unknown": _count(c.get("time_unknown")) or 0})
        out["ops_counted"] += n
    return out


def counts_table(processes: list[dict]) -> pd.DataFrame:
    """``commtrace.load(run, table="counts")``: per (process, group, op) the ops counted, not written."""
    rows = []
    for p in processes:
        cov = p.get("coverage")
        if not isinstance(cov, dict):
            continue
        for c in cov.get("counts") or []:
            rows.append({"rank": p.get("rank"), **c, "file": p.get("file")})
    df = pd.DataFrame(rows, columns=COUNT_COLUMNS)
    for col in ("ops", "bytes", "time_ns", "time_unknown"):
        df[col] = df[col].astype(np.int64)
    return df


def _count(v) -> int | None:
    v = int_or_none(v)
    return v if v is not None and 0 <= v < 2**63 else None


def _str(v) -> str | None:
    return None if v is None else str(v)[:256]
