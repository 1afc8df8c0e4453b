"""Number and string formatting shared by the renderers."""
from __future__ import annotations

import math
import re

from rich.markup import escape

_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain_safe(text) -> str:
    """A trace string made safe for the terminal: control characters shown as \\xNN."""
    s = "" if text is None else str(text)
    return _CTRL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def safe(text) -> str:
    """``plain_safe``, rich markup escaped too (for strings printed as markup)."""
    return escape(plain_safe(text))


def _bad(v) -> bool:
    try:
        return v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))) or v != v
    except (TypeError, ValueError):
        return True


# (below this, divide by, digits, unit) for fmt_ns and fmt_bw, smallest first
_NS_UNITS = ((1e3, 1, 0, "ns"), (1e6, 1e3, 1, "us"), (1e9, 1e6, 2, "ms"), (600e9, 1e9, 3, "s"),
             (math.inf, 60e9, 1, "min"))
_BW_UNITS = ((1e6, 1e3, 1, "kB/s"), (1e9, 1e6, 1, "MB/s"), (math.inf, 1e9, 2, "GB/s"))


def _scaled(v: float, units, size: float) -> str:
    """``v`` in the first of ``units`` that ``size`` is below."""
    for below, div, digits, unit in units:
        if size < below:
            return f"{v / div:.{digits}f} {unit}"


def fmt_ns(ns) -> str:
    return "-" if _bad(ns) else _scaled(float(ns), _NS_UNITS, abs(float(ns)))


def fmt_bytes(b) -> str:
    if _bad(b):
        return "-"
    b = float(b)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(b) < 1024 or unit == "PiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024


def fmt_bw(bps) -> str:
    """Bytes/s as GB/s (1e9, the nccl-tests unit), or MB/s when small."""
    return "-" if _bad(bps) else _scaled(float(bps), _BW_UNITS, float(bps))


def fmt_pct(frac, digits=1) -> str:
    return "-" if _bad(frac) else f"{float(frac) * 100:.{digits}f}%"


def fmt_delta(pct) -> str:
    return "-" if _bad(pct) else f"{float(pct):+.1f}%"


def fmt_int(n) -> str:
    return "-" if _bad(n) else f"{int(n):,}"


def fmt_count(n) -> str:
    """A count, or a mean of counts: an integer when whole, else one decimal."""
    if _bad(n):
        return "-"
    n = float(n)
    return f"{int(round(n)):,}" if abs(n - round(n)) < 0.05 else f"{n:,.1f}"
