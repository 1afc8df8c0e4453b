"""A process group's global ranks: a JSON list of ints in ``group`` lines, text ("0,1,2",
``ranks_text``) in the frame's ``group_ranks`` column -- a categorical, one small code per
op, exported to CSV as it reads -- and ``parse_ranks``, the one parser back.
"""
from __future__ import annotations


def ranks_of(ranks) -> tuple[int, ...] | None:
    """A group line's ``ranks`` as read from its JSON: a tuple, or None unless a list of ints."""
    if not isinstance(ranks, (list, tuple)) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        return None
    return tuple(ranks)


def ranks_text(ranks) -> str | None:
    """The column's text of a group line's ``ranks``: "0,1,2"; None unless a list of ints."""
    valid = ranks_of(ranks)
    return None if valid is None else ",".join(str(r) for r in valid)


def parse_ranks(value) -> tuple[int, ...]:
    """The ranks in ``value``, in its order: a sequence of ints (a group line's ``ranks``),
    or the column's text ("0,1,2"; also "[0, 2]", as a list prints). None, NaN and
    anything unparsable give (); an unparsable element is left out."""
    if value is None or isinstance(value, float):   # NaN: a frame's missing value
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, str):
        parts = value.strip().strip("[]()").split(",")
        return tuple(int(p) for p in (q.strip() for q in parts) if p.lstrip("-").isdigit())
    try:
        return tuple(int(r) for r in value if not isinstance(r, (bool, float, str)))
    except TypeError:
        return ()
