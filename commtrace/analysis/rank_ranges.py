"""Rank sets as text: the formatter lives in the trace layer (``commtrace.trace.rank_ranges``),
whose reader words its own warnings with it; analysis and render import it from here too."""
from ..trace.rank_ranges import (  # noqa: F401  (re-exported: one formatter for every layer)
    FOLD_SHOWN, INLINE_CHARS, RANGES_SHOWN, fmt_ranks, fold_ranks, folded_inline, folded_lines)
