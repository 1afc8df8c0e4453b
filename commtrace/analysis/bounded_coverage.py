"""Which part of a run a bounded trace covers (pure functions over a loaded Run).

Bounded processes (``commtrace run --keep-last N`` / ``--steps A:B``: ``capture.bounded``) carry a
``coverage`` summary (``trace.coverage.describe``): ``report`` shows it in a banner row, ``check`` in
an info finding (``check.diagnoses.diagnose_coverage``), and check judges only what the files show:
a member's missing record means it never arrived only if it did not pass that collective, and a
bounded member that dropped (ring) or counted (outside the steps) the op did (``judged_frame``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.group_ranks import parse_ranks
from ..trace.schema import P2P_OPS


def bounded_processes(processes: list) -> list[dict]:
    return [p for p in processes if isinstance(p, dict) and isinstance(p.get("coverage"), dict)]


def _sum(procs: list[dict], field: str) -> int:
    return sum(int(p["coverage"].get(field) or 0) for p in procs)


def coverage_text(processes: list) -> str | None:
    """One line saying what the bounded processes' files cover (None: no process is bounded)."""
    procs = bounded_processes(processes)
    if not procs:
        return None
    parts = []
    keeps = sorted({p["coverage"]["keep_last"] for p in procs if p["coverage"].get("keep_last")})
    if keeps:
        ring = [p for p in procs if p["coverage"].get("keep_last")]
        n = "/".join(f"{k:,}" for k in keeps)
        parts.append(f"last {n} ops per process kept: {_sum(ring, 'ops_kept'):,} of {_sum(ring, 'ops_seen'):,} "
                     f"finished ops ({_sum(ring, 'ops_dropped'):,} overwritten)")
    windows = sorted({p["coverage"]["steps"] for p in procs if p["coverage"].get("steps")})
    if windows:
        win = [p for p in procs if p["coverage"].get("steps")]
        taken = max(int(p["coverage"].get("steps_done") or 0) for p in win)
        parts.append(f"steps {', '.join(windows)} in full (of {taken:,} taken); {_sum(win, 'ops_counted'):,} ops "
                     f"outside only counted (table counts)")
    text = "; ".join(parts)
    if len(procs) < len(processes):
        text += f"  [{len(procs)} of {len(processes)} processes bounded]"
    return text


def passed_seqs(processes: list) -> dict:
    """(rank, world, group) -> the highest collective seq a bounded rank called (written, dropped, counted)."""
    out: dict = {}
    for p in bounded_processes(processes):
        r = p.get("rank")
        if not isinstance(r, int):
            continue
        for world, group, seq in p["coverage"].get("max_seq") or []:
            key = (r, world, group)
            out[key] = max(out.get(key, 0), int(seq))
    return out


def judged_frame(df: pd.DataFrame, processes: list) -> pd.DataFrame:
    """``df`` without the collectives (world, group, seq) some member has no record of although it
    called them (bounded: dropped or counted)."""
    passed = passed_seqs(processes)
    need = {"world", "group", "seq", "rank", "op", "group_ranks", "group_size"}
    if not passed or not len(df) or not need <= set(df.columns):
        return df
    keys = ["world", "group", "seq"]
    coll = df[~df["op"].astype(str).isin(P2P_OPS).to_numpy()]
    by = coll.groupby(keys, observed=True, sort=False)
    per = pd.DataFrame({"n": by["rank"].nunique(), "size": by["group_size"].first(),
                        "members": by["group_ranks"].first()})
    short = per[per["n"] < per["size"]]          # some member has no record: usually a handful of seqs
    if not len(short):
        return df
    wanted = set(short.index)
    present: dict = {}
    sub = coll[coll["seq"].isin(short.index.get_level_values("seq").unique()).to_numpy()]
    for w, g, s, r in zip(sub["world"].astype(object), sub["group"].astype(object), sub["seq"].to_numpy(),
                          sub["rank"].to_numpy()):
        if (w, g, s) in wanted:
            present.setdefault((w, g, s), set()).add(int(r))
    gone = set()
    for key, row in short.iterrows():
        world, group, seq = key
        missing = set(parse_ranks(row["members"])) - present.get(key, set())
        if any(int(seq) <= passed.get((m, _str(world), _str(group)), 0) for m in missing):
            gone.add((_str(world), _str(group), int(seq)))
    if not gone:
        return df
    keep = np.ones(len(df), dtype=bool)
    cand = np.flatnonzero(df["seq"].isin({s for _, _, s in gone}).to_numpy())
    sub = df.iloc[cand]
    for i, w, g, s, op in zip(cand, sub["world"].astype(object), sub["group"].astype(object), sub["seq"].to_numpy(),
                              sub["op"].astype(str)):
        if op not in P2P_OPS and (_str(w), _str(g), int(s)) in gone:
            keep[i] = False
    return df[keep]


def _str(v):
    return None if v is None or v is pd.NA else str(v)
