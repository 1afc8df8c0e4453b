"""The banner's "clocks" rows: per host, how its clocks were aligned to rank 0's and how well.

Nothing is shown for a one-host run (every rank shares rank 0's clock).
"""
from __future__ import annotations

from .fmt import fmt_ns, plain_safe

_NAMES = {"reference": "reference (rank 0)", "same-host": "rank 0's clock (same host)",
          "gloo-pingpong": "gloo ping-pong", "mpi-pingpong": "MPI ping-pong",
          "wall-clock": "wall clock (NTP; error unknown)", "unaligned": "not aligned (no rank 0 trace)"}
_MAX_HOSTS = 4
_BEYOND_SHOWN_NS = 1_000_000_000  # a rank that ran on after its last measurement (no exit measurement)


def clock_rows(clocks: list[dict] | None) -> list[tuple[str, str]]:
    """(label, text) rows for ``Report.info["clocks"]`` (see ``analysis.clock_summary``)."""
    if not clocks or len(clocks) < 2:
        return []
    if len(clocks) > _MAX_HOSTS:
        return [("clocks", _grouped(clocks))]
    return [("clocks" if i == 0 else "", f"{plain_safe(h['host'])}: {_host_text(h)}") for i, h in enumerate(clocks)]


def method_text(methods: list[list[str]]) -> str:
    """Readable method names (``+`` joins the methods one rank's offset combines)."""
    return ", ".join(" + ".join(_NAMES.get(m, m) for m in combo) for combo in methods)


def _host_text(h: dict) -> str:
    text = method_text(h["methods"])
    u = h.get("uncertainty_ns")
    if h.get("measurements") and u is not None:
        text += f", within ±{fmt_ns(u)} ({h['measurements']} measurements, best round trip {fmt_ns(h.get('rtt_ns'))}"
        if (h.get("beyond_ns") or 0) >= _BEYOND_SHOWN_NS:
            text += f"; runs {fmt_ns(h['beyond_ns'])} past the last one"
        text += ")"
    return text


def _grouped(clocks: list[dict]) -> str:
    """Many hosts: per method, how many hosts and the worst bound (and where)."""
    parts = []
    by_method: dict[str, list[dict]] = {}
    for h in clocks:
        by_method.setdefault(method_text(h["methods"]), []).append(h)
    for text, hosts in by_method.items():
        known = [h for h in hosts if h.get("uncertainty_ns") is not None and h.get("measurements")]
        part = f"{len(hosts)} host{'s' if len(hosts) > 1 else ''} {text}"
        if known:
            worst = max(known, key=lambda h: h["uncertainty_ns"])
            part += f" (worst ±{fmt_ns(worst['uncertainty_ns'])}, {plain_safe(worst['host'])})"
        parts.append(part)
    return "; ".join(parts)
