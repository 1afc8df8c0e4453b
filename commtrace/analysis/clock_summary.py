"""Per host: how its ranks' clocks were put on rank 0's clock, and how well.

From the processes' ``clock`` (``trace.clocks.ProcessClock.describe()``), one entry per host, the
reference host first (``run_info.info_of(...)["clocks"]``):

``host``, ``ranks``, ``per_rank`` (``[{rank, methods, uncertainty_ns, ...}]``)
``methods``          each distinct list of methods a rank's offset combines (``trace.clocks``:
                     reference, same-host, gloo-pingpong, mpi-pingpong, wall-clock, unaligned)
``uncertainty_ns``   the largest bound on a rank's offset error (0 on rank 0's host; None: unknown)
``rtt_ns``           the lowest ping-pong round trip; ``residual_ns``: the largest distance of a
                     measurement from its drift line; ``measurements``: summed over its ranks
``drift_ppm``        the largest drift against rank 0's clock (meaningful when ``span_ns``, first
                     to last measurement, is long)
``beyond_ns``        the longest a rank ran past its last measurement (its bound grows with it)
"""
from __future__ import annotations

_ORDER = ("reference", "same-host")


def clock_summary(processes: list[dict]) -> list[dict]:
    hosts: dict[str, list[dict]] = {}
    for p in processes:
        clock = p.get("clock")
        if isinstance(clock, dict) and isinstance(p.get("rank"), int):
            hosts.setdefault(str(p.get("host")), []).append({"rank": p["rank"], **clock})
    out = [_host_entry(h, sorted(rows, key=lambda r: r["rank"])) for h, rows in hosts.items()]
    return sorted(out, key=lambda e: (["reference"] not in e["methods"], e["host"]))


def _host_entry(host: str, rows: list[dict]) -> dict:
    combos = {tuple(str(m) for m in r.get("methods") or ()) for r in rows}
    methods = [list(c) for c in sorted(combos, key=lambda c: (c[:1] not in [(o,) for o in _ORDER], c))]
    bounds = [r.get("uncertainty_ns") for r in rows]
    rtts = [r["rtt_ns"] for r in rows if isinstance(r.get("rtt_ns"), int)]
    residuals = [r["residual_ns"] for r in rows if isinstance(r.get("residual_ns"), int)]
    drifts = [r["drift_ppm"] for r in rows if isinstance(r.get("drift_ppm"), (int, float))]
    spans = [r["span_ns"] for r in rows if isinstance(r.get("span_ns"), int) and r.get("measurements")]
    beyond = [r["beyond_ns"] for r in rows if isinstance(r.get("beyond_ns"), int)]
    return {
        "host": host, "ranks": [r["rank"] for r in rows], "methods": methods,
        "uncertainty_ns": None if any(not isinstance(b, int) for b in bounds) else max(bounds),
        "rtt_ns": min(rtts) if rtts else None,
        "residual_ns": max(residuals) if residuals else None,
        "measurements": sum(int(r.get("measurements") or 0) for r in rows),
        "drift_ppm": max(drifts, key=abs) if drifts else None,
        "span_ns": min(spans) if spans else None,
        "beyond_ns": max(beyond) if beyond else 0,
        "per_rank": rows,
    }
