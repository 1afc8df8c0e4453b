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


def _shown(text_of: Mapping[int, str], line: Callable[[str, str], str], shown: int) -> tuple[list[str], int]:
    groups = fold_ranks(text_of)
    lines = [line(fmt_ranks(rs), t) for rs, t in groups[:shown]]
    return lines, sum(len(rs) for rs, _ in groups[shown:])


def _more(k: int) -> str:
    return f"... and {k} more rank{'s' if k != 1 else ''}"


def folded_lines(text_of: Mapping[int, str], line: Callable[[str, str], str] = lambda rs, t: f"rank {rs}: {t}",
                 shown: int = FOLD_SHOWN) -> list[str]:
    """One line per group of ranks with equal text (``line(ranks text, text)``), at most
    ``shown`` of them, then "... and K more ranks" for the ranks of the rest."""
    lines, more = _shown(text_of, line, shown)
    return lines + ([_more(more)] if more else [])


def folded_inline(text_of: Mapping[int, str], line: Callable[[str, str], str] = lambda rs, t: f"rank {rs}: {t}",
                  sep: str = "; ", shown: int = FOLD_SHOWN, max_chars: int = INLINE_CHARS) -> str:
    """The groups on one line: "rank 0-699,701-1023: 50; rank 700: 25" -- at most
    ``shown`` groups, and no further group once the line is ``max_chars`` long (the
    first is always shown), then "... and K more ranks"."""
    groups = fold_ranks(text_of)
    parts: list[str] = []
    for i, (rs, t) in enumerate(groups[:shown]):
        part = line(fmt_ranks(rs), t)
        if parts and len(sep.join(parts + [part])) > max_chars:
            break
        parts.append(part)
    more = sum(len(rs) for rs, _ in groups[len(parts):])
    return sep.join(parts + ([_more(more)] if more else []))
