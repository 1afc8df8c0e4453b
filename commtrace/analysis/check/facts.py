"""What the diagnoses need from every op, in mergeable form.

``RunFacts``: figures over every op (how far each rank got per group, each rank's last op, straggler
lags, the latest time known); ``GroupVerdict``: which collectives of a group are worth a finding (the
diagnoses then read only their rows). Both come from a frame: the whole run, or one seq chunk of
every rank (``analysis.partitioned.check_map``), merged per chunk -- a collective's instances are
whole inside a chunk, so the merge equals the one-frame result.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.group_ranks import parse_ranks
from ..arrays import cat_codes
from .fates import fate_of
from .findings import _int, _s
from .matching import COMPARED_FIELDS, collective_rows, _compare_at_seq, _group_members

# Findings show the first few of these; counts stay exact.
MISMATCH_SHOWN = 5
# Stuck: the first seq with an op in flight that is not one of the mismatches shown.
IN_FLIGHT_KEPT = MISMATCH_SHOWN + 1


@dataclass
class Stragglers:
    """A group's collectives every member completed: how many, and per member the lags of those it
    arrived last at, as ``(first seq, array)`` pieces (``lags_of`` joins them in seq order)."""
    members: list
    instances: int = 0
    lags: dict = field(default_factory=dict)   # rank -> [(first seq, lags)]

    def lags_of(self, rank) -> np.ndarray:
        parts = sorted(self.lags.get(rank, []), key=lambda p: p[0])
        return np.concatenate([a for _, a in parts]) if parts else np.empty(0)


@dataclass
class GroupFacts:
    members: list
    desc: str | None = None          # group_desc of the group's first op (frame order)
    desc_at: tuple = (np.inf, np.inf)  # (t_start_ns, rank) of that op
    last_entered: dict = field(default_factory=dict)    # rank -> highest seq it has a record of
    last_completed: dict = field(default_factory=dict)  # rank -> highest seq it completed
    in_flight: dict = field(default_factory=dict)       # rank -> seqs in flight


@dataclass
class RunFacts:
    has_ops: bool = False
    t_max: int | None = None          # latest start or end of any op
    group_ranks: set = field(default_factory=set)       # (world, global ranks (a tuple)) of every group of any op
    last_ops: pd.DataFrame = field(default_factory=pd.DataFrame)   # per (world, rank) its last op (frame rows)
    groups: dict = field(default_factory=dict)          # (world, group) -> GroupFacts, in the frame's group order
    stragglers: dict = field(default_factory=dict)      # (world, group) -> Stragglers
    _last_at: dict | None = field(default=None, repr=False, compare=False)   # last_op's lookup

    def merge(self, other: "RunFacts") -> None:
        """Fold in the facts of ops disjoint from these (another seq chunk)."""
        if not other.has_ops:
            return
        self.has_ops = True
        self.t_max = max((t for t in (self.t_max, other.t_max) if t is not None), default=None)
        self.group_ranks |= other.group_ranks
        if len(other.last_ops):
            both = pd.concat([self.last_ops, other.last_ops]) if len(self.last_ops) else other.last_ops
            both = both.sort_values("t_start_ns", kind="stable")
            self.last_ops = both[~both.index.duplicated(keep="last")]
            self._last_at = None
        for key, g in other.groups.items():
            mine = self.groups.setdefault(key, GroupFacts(g.members))
            if g.desc_at < mine.desc_at:
                mine.desc, mine.desc_at = g.desc, g.desc_at
            for last, new in ((mine.last_entered, g.last_entered), (mine.last_completed, g.last_completed)):
                for r, s in new.items():
                    last[r] = max(s, last.get(r, s))
            for r, seqs in g.in_flight.items():
                mine.in_flight[r] = sorted(mine.in_flight.get(r, []) + seqs)
        for key, s in other.stragglers.items():
            mine = self.stragglers.setdefault(key, Stragglers(s.members))
            mine.instances += s.instances
            for r, parts in s.lags.items():
                mine.lags.setdefault(r, []).extend(parts)

    def last_op(self, rank, worlds=()):
        """The op with the latest start (a frame row) of ``rank`` in any of ``worlds`` (none: any), or None."""
        if self._last_at is None:     # rank -> [(world, start, position in last_ops)], built once
            self._last_at = {}
            starts = self.last_ops["t_start_ns"].to_numpy(np.int64) if len(self.last_ops) else ()
            for i, ((w, r), t) in enumerate(zip(self.last_ops.index if len(self.last_ops) else (), starts)):
                self._last_at.setdefault(int(r), []).append((w, int(t), i))
        at = [(t, i) for w, t, i in self._last_at.get(int(rank), ()) if not worlds or w in worlds]
        return self.last_ops.iloc[max(at)[1]] if at else None


def frame_facts(df: pd.DataFrame, members: dict | None = None) -> RunFacts:
    """The facts of the ops in ``df`` (a whole run, or whole instances of one seq chunk).
    ``members``: (world, group) -> member ranks when known (partitioned); else from group_ranks."""
    facts = RunFacts()
    if not len(df):
        return facts
    facts.has_ops = True
    ends = [_int(pd.to_numeric(df[c], errors="coerce").max()) for c in ("t_start_ns", "t_end_ns")]
    facts.t_max = max((t for t in ends if t is not None), default=None)
    world, worlds = _codes(df["world"])
    ranks, rank_lists = _codes(df["group_ranks"])
    facts.group_ranks = {(worlds[k >> 32], parse_ranks(rank_lists[k & 0xFFFFFFFF]))
                         for k in pd.unique(((world + 1) << 32) | (ranks + 1)).tolist() if k & 0xFFFFFFFF}
    facts.last_ops = _last_ops(df)
    coll = collective_rows(df)
    if not len(coll):
        return facts
    for (world, group), gdf in coll.groupby(["world", "group"], observed=True, sort=True):
        key = (_s(world), _s(group))
        known = members.get(key) if members else None
        g = facts.groups[key] = GroupFacts(known if known is not None else _group_members(gdf))
        if "group_desc" in gdf:
            g.desc, g.desc_at = _s(gdf["group_desc"].iloc[0]), (int(gdf["t_start_ns"].iloc[0]), int(gdf["rank"].iloc[0]))
        st = gdf["status"]
        g.last_entered = {int(r): int(s) for r, s in gdf.groupby("rank", observed=True)["seq"].max().items()}
        done = gdf[(st == "completed").to_numpy()]
        g.last_completed = {int(r): int(s) for r, s in done.groupby("rank", observed=True)["seq"].max().items()}
        fl = gdf[(st == "in_flight").to_numpy()]
        for r, seqs in fl.groupby("rank", observed=True)["seq"]:
            g.in_flight[int(r)] = sorted(int(s) for s in seqs)
        s = straggler_lags(done, known if known is not None else _group_members(done) if len(done) else [])
        if s is not None:
            facts.stragglers[key] = s
    return facts


def _last_ops(df: pd.DataFrame) -> pd.DataFrame:
    """Per (world, rank), its index, its op with the latest start (the last such in frame order)."""
    t = df["t_start_ns"].to_numpy()
    world, names = _codes(df["world"])
    rank = df["rank"].to_numpy().astype(np.int64)
    key = ((world + 1) << 32) | (rank & 0xFFFFFFFF)     # world code -1: none
    tmax = pd.Series(t).groupby(key).transform("max").to_numpy()
    at = np.flatnonzero(t == tmax)
    pos = pd.Series(at).groupby(key[at]).max().to_numpy()
    index = pd.MultiIndex.from_arrays([[names[c + 1] for c in world[pos]], rank[pos]], names=["world", "rank"])
    return df.iloc[pos].set_axis(index, axis=0)


def _codes(col: pd.Series) -> tuple[np.ndarray, list]:
    """``arrays.cat_codes`` as int64 and the texts the codes stand for, from code -1 (none) on."""
    codes, values = cat_codes(col)
    return codes.astype(np.int64), [None] + [_s(v) for v in values]


def straggler_lags(done: pd.DataFrame, members: list) -> Stragglers | None:
    """Per collective every member completed (``done``: one group's completed rows): the member
    arriving last (ties: the lowest rank) and its lag (last - median arrival; two members: - first)."""
    if len(members) < 2 or not len(done):
        return None
    # seq x member start times (a member's last row of a seq), the seqs every member completed
    m = np.asarray(members, dtype=np.int64)
    col, ok = _member_columns(m, done["rank"].to_numpy().astype(np.int64))
    seqs, row = np.unique(done["seq"].to_numpy().astype(np.int64)[ok], return_inverse=True)
    arr = np.full((len(seqs), len(m)), np.nan)
    arr[row.reshape(-1), col[ok]] = done["t_start_ns"].to_numpy(np.float64)[ok]   # the last row wins
    whole = ~np.isnan(arr).any(axis=1)
    arr, seqs = arr[whole], seqs[whole]
    out = Stragglers(list(members), len(arr))
    if not len(arr):
        return out
    last = arr.argmax(axis=1)
    lag = arr.max(axis=1) - np.median(arr, axis=1) if len(members) > 2 else arr.max(axis=1) - arr.min(axis=1)
    first = int(seqs[0])
    for ci, r in enumerate(m.tolist()):
        sel = last == ci
        if sel.any():
            out.lags[int(r)] = [(first, lag[sel])]
    return out


# -- which collectives of a group are worth a finding ---------------------------------

@dataclass
class GroupVerdict:
    """Per group, ascending seqs: mismatches, members absent where others entered (``missing``:
    never arrived; ``lost``: arrived, record unreadable), ops in flight, failed ops. Only the first
    few are kept (what the findings show); the ``n_`` counts and ``lost_seqs`` stay exact."""
    mismatch: list = field(default_factory=list)
    n_mismatch: int = 0
    missing: list = field(default_factory=list)     # (seq, [ranks])
    n_missing: int = 0
    lost: list = field(default_factory=list)        # (seq, [ranks])
    lost_seqs: list = field(default_factory=list)
    in_flight: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    n_failed: int = 0

    def merge(self, other: "GroupVerdict") -> None:
        for name, keep in _KEPT.items():
            setattr(self, name, sorted(getattr(self, name) + getattr(other, name))[:keep])
        self.n_mismatch += other.n_mismatch
        self.n_missing += other.n_missing
        self.n_failed += other.n_failed

    def cap(self) -> None:
        for name, keep in _KEPT.items():
            setattr(self, name, getattr(self, name)[:keep])

    def seqs(self) -> set:
        """The seqs whose rows the findings show."""
        return (set(self.mismatch) | {s for s, _ in self.missing} | {s for s, _ in self.lost} | set(self.in_flight)
                | set(self.failed))


# How many of each list a GroupVerdict keeps (None: all).
_KEPT = {"mismatch": MISMATCH_SHOWN, "missing": 1, "lost": 1, "lost_seqs": None, "in_flight": IN_FLIGHT_KEPT,
         "failed": 1}


def classify_group(gdf: pd.DataFrame, members: list, last_seq: dict, fates: dict, group,
                   world=None) -> tuple[GroupVerdict, dict]:
    """The verdict over one group (of ``world``)'s collectives in ``gdf`` (whole instances) and the rows
    of the seqs it names. ``last_seq``: rank -> its highest seq of this group (whole run); ``fates``:
    (world, rank) -> RankFate (fates.rank_fates). Only seqs with a differing field or an op not
    completed are compared one by one."""
    v = GroupVerdict()
    seq = gdf["seq"].to_numpy().astype(np.int64)
    if not len(seq):
        return v, {}
    useq, inv = np.unique(seq, return_inverse=True)
    inv = inv.reshape(-1)
    look = _differs(gdf, inv, len(useq))
    look[np.unique(inv[(gdf["status"] != "completed").to_numpy()])] = True
    _absent(v, gdf, useq, inv, members, last_seq, fates, group, world)
    shown = set(useq[look].tolist()) | {s for s, _ in v.missing} | {s for s, _ in v.lost}
    sub = gdf[np.isin(seq, list(shown))] if len(shown) < len(useq) else gdf
    by_seq = {int(s): sdf for s, sdf in sub.groupby("seq", sort=True)}
    for s in useq[look].tolist():
        sdf = by_seq[s]
        if sdf["rank"].nunique() >= 2 and _compare_at_seq(sdf.drop_duplicates("rank", keep="last")):
            v.mismatch.append(s)
        sst = sdf["status"].astype(str)
        if (sst == "in_flight").any():
            v.in_flight.append(s)
        if (sst == "failed").any():
            v.failed.append(s)
    v.n_mismatch, v.n_failed = len(v.mismatch), len(v.failed)
    return v, by_seq


def classify_frame(df: pd.DataFrame, members: dict, last_seq: dict, fates: dict) -> tuple[dict, list]:
    """``classify_group`` over every group of ``df`` (keys (world, group), as ``members`` and ``last_seq``):
    the verdicts, capped to what the findings show, and the rows of the seqs they name."""
    verdicts, kept = {}, []
    coll = collective_rows(df)
    for (w, g), gdf in (coll.groupby(["world", "group"], observed=True, sort=False) if len(coll) else ()):
        key = (_s(w), _s(g))
        v, by_seq = classify_group(gdf, members.get(key, []), last_seq.get(key, {}), fates, key[1], key[0])
        v.cap()
        verdicts[key] = v
        kept += [by_seq[s] for s in sorted(v.seqs())]
    return verdicts, kept


# The fields _compare_at_seq compares: a seq where all of them agree has no mismatch.
_COMPARED = ("op", *(col for _, col, _, _ in COMPARED_FIELDS))


def _differs(gdf: pd.DataFrame, inv: np.ndarray, k: int) -> np.ndarray:
    """Per seq: some compared field has more than one value among its rows."""
    flag = np.zeros(k, bool)
    for col in _COMPARED:
        if col not in gdf:
            continue
        c = gdf[col]
        codes = (c.cat.codes.to_numpy() if isinstance(c.dtype, pd.CategoricalDtype)    # NaN: -1, a value too
                 else pd.factorize(c, use_na_sentinel=False)[0])            # NA: a value too
        first = np.empty(k, codes.dtype)
        first[inv[::-1]] = codes[::-1]        # each seq's first row's code (the last write wins)
        flag[inv[codes != first[inv]]] = True   # a row that differs from it: not one value
    return flag


def _absent(v: GroupVerdict, gdf, useq, inv, members: list, last_seq: dict, fates: dict, group, world) -> None:
    """Members without a row at a seq others entered: ``missing`` (never arrived), or ``lost`` (it
    did arrive: the rank has a later seq of the group, or its file lost records there)."""
    if not members:
        return
    m = np.asarray(members, dtype=np.int64)
    col, is_member = _member_columns(m, gdf["rank"].to_numpy().astype(np.int64))
    count = _members_per_seq(inv[is_member], col[is_member], len(useq), len(m))
    short = np.flatnonzero(count < len(m))
    if not len(short):
        return
    row = np.full(len(useq), -1)
    row[short] = np.arange(len(short))
    present = np.zeros((len(short), len(m)), bool)
    sel = is_member & (row[inv] >= 0)
    present[row[inv[sel]], col[sel]] = True
    seqs = useq[short][:, None]
    later = np.array([last_seq.get(int(r), 0) for r in m])[None, :] > seqs
    anywhere, lo, hi = _lost_spans(fates, world, group, m)
    lost = ~present & (later | anywhere[None, :] | ((lo[None, :] <= seqs) & (seqs <= hi[None, :])))
    missing = ~present & ~lost
    has_missing = missing.any(axis=1)
    v.n_missing = int(has_missing.sum())
    if v.n_missing:
        i = int(np.argmax(has_missing))
        v.missing = [(int(useq[short[i]]), m[missing[i]].tolist())]
    has_lost = lost.any(axis=1)
    if has_lost.any():
        i = int(np.argmax(has_lost))
        v.lost = [(int(useq[short[i]]), m[lost[i]].tolist())]
        v.lost_seqs = useq[short[has_lost]].tolist()


def _member_columns(members: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the index in ``members`` (distinct, any order, not empty) of its rank, and whether
    it is a member (a table indexed by rank where ranks are small, as they are)."""
    top = max(int(members.max()), int(rank.max(initial=-1)))
    if top < (1 << 20) and int(members.min()) >= 0 and int(rank.min(initial=0)) >= 0:
        lut = np.full(top + 1, -1, np.int64)
        lut[members] = np.arange(len(members))
        col = lut[rank]
        return np.maximum(col, 0), col >= 0
    order = np.argsort(members, kind="stable")
    pos = np.minimum(np.searchsorted(members[order], rank), len(members) - 1)
    return order[pos], members[order][pos] == rank


def _members_per_seq(seq_ix: np.ndarray, member_ix: np.ndarray, n_seqs: int, n_members: int) -> np.ndarray:
    """Per seq: how many distinct members have a row: a table of every (seq, member) pair (a byte
    each) where not much bigger than the rows, else a sort of the pairs."""
    if n_seqs * n_members <= 8 * len(seq_ix) + (1 << 20):
        table = np.zeros(n_seqs * n_members, bool)
        table[seq_ix * n_members + member_ix] = True
        return table.reshape(n_seqs, n_members).sum(axis=1)
    return np.bincount(np.unique(seq_ix * n_members + member_ix) // n_members, minlength=n_seqs)


def _lost_spans(fates: dict, world, group, members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per member (a rank of ``world``): whether it lost records of an unnamed group (any seq may be
    lost), and the seq span it lost of ``group`` (empty: lo > hi)."""
    anywhere = np.zeros(len(members), bool)
    lo, hi = np.ones(len(members), np.int64), np.zeros(len(members), np.int64)
    for i, r in enumerate(members.tolist()):
        fate = fate_of(fates, world, r)
        if fate is None:
            continue
        anywhere[i] = "?" in fate.lost
        span = fate.lost.get(str(group))
        if span and _int(span[0]) is not None:
            lo[i], hi[i] = _int(span[0]), _int(span[1]) or 0
    return anywhere, lo, hi
