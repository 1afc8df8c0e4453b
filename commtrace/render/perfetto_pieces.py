"""``report --perfetto`` of a run too big to hold whole: files of at most ``--perfetto-max-mb``
(``write_perfetto_pieces``), rank subsets or time windows of one rank, on one time base."""
from __future__ import annotations

import numpy as np


# Perfetto JSON per op, flows included (docs/report-performance.md: 908 MB for 1 M ops + 0.9 M flows).
PERFETTO_BYTES_PER_OP = 1000


def write_perfetto_pieces(path: str, s, max_mb: float) -> list[str]:
    """Files of at most ``max_mb`` MB (at PERFETTO_BYTES_PER_OP), each some ranks or a time window of
    one rank (analysis.partitioned.perfetto_pieces), on one time base. Every op, span, mark and
    region is in exactly one file: a window holds those starting in it (a span crossing its end whole)."""
    from ..analysis.match import match_ops
    from ..analysis.partitioned import load_ranks, perfetto_pieces, piece_span, scan
    from .perfetto import write_perfetto
    parts = {p.rank: p for p in scan(s.path)}
    t0 = _time_base(s, parts.values())
    ops = {r: int(c) for r, c in s.ops_per_rank.items()}
    max_ops = max(1, int(max_mb * 1e6 / PERFETTO_BYTES_PER_OP))
    base, ext = (path[:-5], ".json") if path.endswith(".json") else (path, ".json")
    written = []
    for ranks, piece, pieces in perfetto_pieces(ops, max_ops):
        run = _in_window(load_ranks([parts[r] for r in ranks]), s)
        frame, spans, marks, regions = run.frame, run.spans, run.marks, run.regions
        if piece is not None:          # a time window of one rank: its ops [lo, hi) in start order
            frame = frame.sort_values("t_start_ns", kind="stable", ignore_index=True)
            lo, hi, t_lo, t_hi = piece_span(frame["t_start_ns"].to_numpy(np.int64), piece, pieces)
            frame = frame.iloc[lo:hi].reset_index(drop=True)
            spans = _starting_in(spans, "t_begin_ns", t_lo, t_hi)
            marks = _starting_in(marks, "t_ns", t_lo, t_hi)
            regions = _starting_in(regions, "t_begin_ns", t_lo, t_hi)
        name = f"ranks-{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank-{ranks[0]}"
        if piece is not None:
            name += f".part-{piece + 1}-of-{pieces}"
        out = f"{base}.{name}{ext}"
        start = frame["t_start_ns"].to_numpy(np.int64) if len(frame) else None
        if start is not None and not (start[1:] >= start[:-1]).all():
            frame = frame.sort_values(["t_start_ns", "rank"], kind="stable", ignore_index=True)
        inst = match_ops(frame).inst if len(frame) else None
        write_perfetto(frame, out, t0, inst, run.processes, spans=spans, marks=marks, regions=regions)
        written.append(out)
    return written


def _time_base(s, parts) -> int | None:
    """Every piece's time 0, as the one-file export's: the run's first op or an earlier span, mark or
    region shown (left to itself, a file would start at its own first event and pieces would not
    line up). Reads each rank's meta and spans files once more, not its ops."""
    from ..analysis.partitioned.op_view import tables_in_window
    firsts = [s.t0_ns] if s.t0_ns is not None else []
    for part in parts:
        for table, col in zip(tables_in_window(*part.mark_tables(), s.bounds), ("t_begin_ns", "t_ns", "t_begin_ns")):
            if table is not None and len(table):
                firsts.append(int(table[col].min()))
    return min(firsts) if firsts else None


def _starting_in(table, begin: str, t_lo: int | None, t_hi: int | None):
    """The rows of ``table`` whose ``begin`` time is in [t_lo, t_hi) (None: open)."""
    if table is None or not len(table):
        return table
    t = table[begin].to_numpy("int64")
    keep = np.ones(len(t), dtype=bool)
    if t_lo is not None:
        keep &= t >= t_lo
    if t_hi is not None:
        keep &= t < t_hi
    return table[keep].reset_index(drop=True)


def _in_window(run, s):
    """Some ranks' reader.Run cut to the window of Report ``s`` (windowing.frame_in_window's ops;
    spans, marks, regions overlapping their rank's interval)."""
    from ..analysis.partitioned.windowing import frame_in_window
    from ..analysis.partitioned.op_view import tables_in_window
    phases = s.window.phases if s.window is not None else None
    if s.bounds is None and phases is None:
        return run
    return type(run)(run.path, frame_in_window(run.frame, s.bounds, phases), run.processes, run.issues,
                     *tables_in_window(run.spans, run.marks, run.regions, s.bounds))
