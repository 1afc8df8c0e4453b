"""Rank sets as text that stays short at thousands of ranks ("0-699,701-1023"), and ranks
grouped by equal text. Every line of check, the report's banner and the reader's warnings
that names ranks uses these (docs/faults.md, "Many ranks"); in trace/ so the reader can.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

# A rank set written as more than this many ranges/singletons shows these first,
# then how many ranks it has in all.
RANGES_SHOWN = 8
# Groups of ranks with different text: the first this many are printed, then
# "... and K more ranks".
FOLD_SHOWN = 8
# Groups on one line (folded_inline) stop before the line grows past this many characters.
INLINE_CHARS = 200


def fmt_ranks(ranks: Iterable, max_parts: int | None = RANGES_SHOWN) -> str:
    """[0, 1, 2, 3, 5] -> "0-3,5"; no ranks -> "-". With more than ``max_parts``
    ranges, the first ``max_parts`` and the count: "0,2,4,...,30,... (512 ranks)"."""
    ranks = sorted(set(int(r) for r in ranks))
    if not ranks:
        return "-"
    parts, start, prev = [], ranks[0], ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    if max_parts is not None and len(parts) > max_parts:
        return ",".join(parts[:max_parts]) + f",... ({len(ranks)} ranks)"
    return ",".join(parts)


def fold_ranks(text_of: Mapping[int, str]) -> list[tuple[list[int], str]]:
    """Ranks grouped by equal text: [(ranks ascending, text)], ordered by each group's
    first rank."""
    groups: dict[str, list[int]] = {}
    for r in sorted(text_of):
        groups.setdefault(text_of[r], []).append(int(r))
    return sorted(((rs, t) for t, rs in groups.items()), key=lambda g: g[0][0])


def _and_more(groups: list, parts: list[str]) -> list[str]:
    """``parts`` (lines of the first groups), then "... and K more ranks" for the ranks of the rest."""
    more = sum(len(rs) for rs, _ in groups[len(parts):])
    return parts + ([f"... and {more} more rank{'s' if more != 1 else ''}"] if more else [])


def folded_lines(text_of: Mapping[int, str], line: Callable[[str, str], str] = lambda rs, t: f"rank {rs}: {t}",
                 shown: int = FOLD_SHOWN) -> list[str]:
    """One line per group of ranks with equal text (``line(ranks text, text)``), at most
    ``shown`` of them, then "... and K more ranks" for the ranks of the rest."""
    groups = fold_ranks(text_of)
    return _and_more(groups, [line(fmt_ranks(rs), t) for rs, t in groups[:shown]])


def folded_inline(text_of: Mapping[int, str],
                  line: Callable[[str, str], str] = lambda rs, t: f"rank {rs}: {t}") -> str:
    """The groups on one line: "rank 0-699,701-1023: 50; rank 700: 25" -- at most ``FOLD_SHOWN``
    groups, and no further group once the line is ``INLINE_CHARS`` long (the first is always
    shown), then "... and K more ranks"."""
    groups = fold_ranks(text_of)
    parts: list[str] = []
    for rs, t in groups[:FOLD_SHOWN]:
        part = line(fmt_ranks(rs), t)
        if parts and len("; ".join(parts + [part])) > INLINE_CHARS:
            break
        parts.append(part)
    return "; ".join(_and_more(groups, parts))


# -- a rank of a world as one number ----------------------------------------------------
# The report keys every per-rank figure by a rank *of a world* (a run can make several worlds
# one after another: each has its rank 0). Its key is world number * WORLD_STRIDE + rank, the
# worlds numbered in the order they were created (reader.number_worlds): the first world's ranks are
# their own keys, so a run of one world is keyed, and shown, by rank alone. Keys fit int32.
WORLD_STRIDE = 1 << 20


def rank_key(world: int, rank: int) -> int:
    """Rank ``rank`` of world number ``world`` (-1, no rank: -1)."""
    return rank if rank < 0 else world * WORLD_STRIDE + rank


def several_worlds(keys: Iterable) -> bool:
    """Rank keys of more than the first world: labels then name the world."""
    return any(int(k) >= WORLD_STRIDE for k in keys)


def rank_name(key: int, several: bool) -> str:
    """A rank key as shown: "3", or "w1:r3" (rank 3 of world 1) when the run has ``several`` worlds."""
    key = int(key)
    return f"w{key // WORLD_STRIDE}:r{key % WORLD_STRIDE}" if several and key >= 0 else str(key)


def world_group_name(name: str, world: int | None) -> str:
    """A group as the report names it: its name, or "w1:0" (group 0 of world 1) when the run has several
    worlds (``world``: its world's number; None: one world)."""
    return name if world is None else f"w{world}:{name}"


def fmt_rank_keys(keys: Iterable, several: bool = False) -> str:
    """fmt_ranks of rank keys: "0-3,5" for one world, "w0:r0-3 w1:r0-1" for several (or when they are
    some ranks of a run of ``several`` worlds: "w0:r1" is world 0's rank 1 there, not just "1")."""
    keys = sorted(set(int(k) for k in keys))
    if not (several or several_worlds(keys)):
        return fmt_ranks(keys)
    worlds: dict = {}
    for k in keys:
        worlds.setdefault(k // WORLD_STRIDE, []).append(k % WORLD_STRIDE)
    # a run of 3 or more consecutive worlds of the same ranks is one part: "w0-210:r0-1"
    runs: list = []   # [first world, last world, ranks text]
    for w, rs in worlds.items():
        text = fmt_ranks(rs)
        if runs and runs[-1][1] == w - 1 and runs[-1][2] == text:
            runs[-1][1] = w
        else:
            runs.append([w, w, text])
    parts = []
    for first, last, text in runs:
        if last - first >= 2:
            parts.append(f"w{first}-{last}:r{text}")
        else:
            parts.extend(f"w{w}:r{text}" for w in range(first, last + 1))
    if len(parts) > RANGES_SHOWN:
        return " ".join(parts[:RANGES_SHOWN]) + f" ... ({len(worlds)} worlds)"
    return " ".join(parts)
