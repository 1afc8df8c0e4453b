"""Load a run for reporting: reader issues, mixed run ids, and the banner numbers."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import CommtraceError
from ..trace import reader, schema
from . import intervals
from .bounded_coverage import coverage_text
from .check.fates import ENDED_NORMALLY, fates_by_rank


def no_rank_error(path: str, unranked: list[dict]) -> CommtraceError:
    """Why a run of processes that never had a rank (the reader's summaries) has nothing to report."""
    simulated = sorted({b for p in unranked for b in p.get("untraced_backends") or ()})
    if simulated:
        return CommtraceError(f"{path}: no op was traced: the program's process groups were all of torch's simulated "
                              f"backends ({', '.join(simulated)}), which commtrace leaves untraced: their ranks are "
                              f"not processes (README, Known limitations)")
    return CommtraceError(f"{path}: no process created a process group ({len(unranked)} process(es) ended before; "
                          f"`commtrace check {path}` says how)")


def load_report_run(run_dir: str | None = None) -> reader.Run:
    """reader.load_run of the run's own files (``one_run``: ranks as the report keys them, rank keys, and
    the files of another run left out, an issue each). Raises CommtraceError if nothing is usable."""
    run = reader.load_run(run_dir, rank_keys=True, one_run=True)
    frame, procs = run.frame, run.processes
    if not procs:
        if run.unranked:
            raise no_rank_error(run.path, run.unranked)
        raise CommtraceError(f"{run.path}: no usable trace files")
    start = frame["t_start_ns"].to_numpy() if len(frame) else None
    if start is not None and not (start[1:] >= start[:-1]).all():
        frame = frame.sort_values(["t_start_ns", "rank"], kind="stable", ignore_index=True)
    return replace(run, frame=frame)


def _wall_span(p: dict):
    """(start, end) of a process on its host's monotonic clock: its start to its end record."""
    start = p.get("t_mono_ns")
    end = (p.get("end") or {}).get("t_mono_ns") if isinstance(p.get("end"), dict) else None
    return (start, end) if isinstance(start, int) and isinstance(end, int) and end > start else None


def _aligned_life(p: dict, span, frame_end: int | None):
    """(start, end) of a process on rank 0's clock (its offset at its start; none known, one
    host: 0): its start to its end record (``span``: ``_wall_span``), without one to its last op
    (``frame_end``, aligned)."""
    clock = p.get("clock") if isinstance(p.get("clock"), dict) else {}
    start = clock.get("start_aligned_ns")
    if not isinstance(start, int):
        return None
    end = span[1] + start - span[0] if span is not None else frame_end
    return (start, end) if end is not None and end > start else None


def info_of(path: str, run_id, procs: list[dict], *, t0: int | None, first_start: int | None, last_end: dict,
            comm_ns_per_rank: dict, spans_of_file: dict, ops: int, nbytes: int, failed: int, in_flight: int,
            window_ns_per_rank: dict | None = None) -> dict:
    """The banner's numbers from per-rank parts (partitioned.rank_banner); ``spans_of_file``: per file
    stem, first op start to last op end (bounded processes)."""
    ranks = sorted({p["rank"] for p in procs if isinstance(p.get("rank"), int)})
    world_size = max([p["world_size"] for p in procs if isinstance(p.get("world_size"), int)] or [len(ranks)])
    cmd = next((p.get("command") for p in procs if p.get("rank") == 0 and p.get("command")), None) \
        or next((p.get("command") for p in procs if p.get("command")), None)
    command = " ".join(map(str, cmd)) if isinstance(cmd, list) else (str(cmd) if cmd else "")
    t1 = max(last_end.values()) if last_end else None
    # A rank's wall time is the union of its processes' lives: a run can hold several
    # worlds one after another (a test suite spawning fresh ranks per test), and
    # processes a rank forks (DataLoader workers) live inside its own life (each starts at
    # its fork), so a sum would count that time again per worker.
    walls: dict = {}
    lives: dict = {}     # (rank, host) -> process (start, end) on that host's monotonic clock
    run_lives = []       # every ranked process's (start, end) on rank 0's clock
    covered: dict = {}   # a bounded process shares over the time its records cover, not its wall time
    for p in procs:
        r = p.get("rank")
        if not isinstance(r, int):
            continue  # a process that never had a rank (the parent of spawned ranks)
        span = _wall_span(p)
        life = _aligned_life(p, span, last_end.get(r))
        if life is not None:
            run_lives.append(life)
        # its wall time: its end record less its start, on its own clock; without one, its life up to its last op
        w = span[1] - span[0] if span is not None else (life[1] - life[0] if life is not None else None)
        if span is not None:
            lives.setdefault((r, p.get("host")), []).append(span)
        elif w:
            walls[r] = walls.get(r, 0) + w
        if spans_of_file:
            if isinstance(p.get("coverage"), dict):
                w = spans_of_file.get(schema.stem_of(str(p.get("file") or "")), 0)
            covered[r] = covered.get(r, 0) + (w or 0)
    for (r, _), spans in lives.items():
        walls[r] = walls.get(r, 0) + intervals.length(intervals.union(*zip(*spans)))
    denominators = window_ns_per_rank if window_ns_per_rank is not None else (covered or walls)
    shares = {r: comm_ns_per_rank.get(r, 0) / w for r, w in denominators.items() if w}
    share_vals = np.array(list(shares.values()), dtype=float)
    return {
        "run_dir": path, "run_id": run_id, "command": command,
        "ranks": len(ranks), "world_size": world_size, "rank_list": ranks,
        "hosts": sorted({str(p.get("host")) for p in procs}),
        "backends": sorted({b for p in procs for b in (p.get("backends") or []) if b and b != "None"}),
        "torch_version": next((p.get("torch_version") for p in procs if p.get("torch_version")), None),
        "clocks": clock_summary(procs),
        "coverage": coverage_text(procs),
        # the run's: first start to last end (worlds one after another: every world's time)
        "wall_ns": max(e for _, e in run_lives) - min(s for s, _ in run_lives) if run_lives else
        (max(walls.values()) if walls else None),
        "window_ns": max(window_ns_per_rank.values()) if window_ns_per_rank else None,
        "span_ns": (t1 - first_start) if first_start is not None else 0, "t0_ns": t0,
        "comm_share": {k: float(getattr(share_vals, k)()) if len(share_vals) else None
                       for k in ("min", "mean", "max")},
        "comm_share_per_rank": {int(k): float(v) for k, v in shares.items()},
        "comm_ns_per_rank": comm_ns_per_rank,
        "ops": ops, "bytes": nbytes, "failed": failed, "in_flight": in_flight,
        "incomplete_ranks": sorted(p.get("rank") for p in procs if not p.get("complete") and p.get("rank") is not None),
        "endings": {r: text for r, f in sorted(fates_by_rank(procs).items())
                    if (text := f.describe()) != ENDED_NORMALLY},
    }


_CLOCK_ORDER = ("reference", "same-host")


def clock_summary(processes: list[dict]) -> list[dict]:
    """``info["clocks"]``: per host (the reference host first), from its processes' ``clock``
    (``trace.clocks.ProcessClock.describe()``), how its ranks' clocks were put on rank 0's and how well:
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
    hosts: dict[str, list[dict]] = {}
    for p in processes:
        clock = p.get("clock")
        if isinstance(clock, dict) and isinstance(p.get("rank"), int):
            hosts.setdefault(str(p.get("host")), []).append({"rank": p["rank"], **clock})
    out = []
    for host, rows in hosts.items():
        rows.sort(key=lambda r: r["rank"])
        combos = {tuple(str(m) for m in r.get("methods") or ()) for r in rows}
        first = [(o,) for o in _CLOCK_ORDER]
        bounds = [r.get("uncertainty_ns") for r in rows]
        rtts = [r["rtt_ns"] for r in rows if isinstance(r.get("rtt_ns"), int)]
        residuals = [r["residual_ns"] for r in rows if isinstance(r.get("residual_ns"), int)]
        drifts = [r["drift_ppm"] for r in rows if isinstance(r.get("drift_ppm"), (int, float))]
        spans = [r["span_ns"] for r in rows if isinstance(r.get("span_ns"), int) and r.get("measurements")]
        beyond = [r["beyond_ns"] for r in rows if isinstance(r.get("beyond_ns"), int)]
        out.append({
            "host": host, "ranks": [r["rank"] for r in rows],
            "methods": [list(c) for c in sorted(combos, key=lambda c: (c[:1] not in first, c))],
            "uncertainty_ns": None if any(not isinstance(b, int) for b in bounds) else max(bounds),
            "rtt_ns": min(rtts) if rtts else None,
            "residual_ns": max(residuals) if residuals else None,
            "measurements": sum(int(r.get("measurements") or 0) for r in rows),
            "drift_ppm": max(drifts, key=abs) if drifts else None,
            "span_ns": min(spans) if spans else None,
            "beyond_ns": max(beyond) if beyond else 0,
            "per_rank": rows,
        })
    return sorted(out, key=lambda e: (["reference"] not in e["methods"], e["host"]))
