"""``commtrace report`` of a run analysed by map/reduce (analysis.partitioned): the one-frame
report's banner (plus an ``analysis`` row), step, per-op, region and skew tables and timeline
(analysis.partitioned.timeline_map), in any window; ``--events`` (``--limit``: ``first_events``;
without: a streaming merge of every rank's ops, analysis.partitioned.events_merge), Perfetto in
pieces (``write_perfetto_pieces``)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
from rich.text import Text

from .fmt import fmt_int
from .terminal import (render_banner, render_by, render_modules, render_nothing_shown, render_regions, render_skew,
                       render_steps, render_summary)


# Perfetto JSON per op, flows included (docs/report-performance.md: 908 MB for 1 M ops + 0.9 M flows).
PERFETTO_BYTES_PER_OP = 1000


def write_perfetto_pieces(path: str, s, max_mb: float) -> list[str]:
    """The Perfetto export of a run too big for one file: files of at most ``max_mb`` MB
    (estimated at PERFETTO_BYTES_PER_OP), each a subset of the ranks, or a time window of
    one rank with more ops than that (analysis.partitioned.perfetto_pieces); one time base. In a
    window: the ops in it, and the spans, marks and regions overlapping it (as the one-frame
    export). Every op, span, mark and region is in exactly one file: a time window of a rank
    holds those that start in it (analysis.partitioned.piece_span), a span crossing its end
    whole."""
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
    """The time 0 of every piece: the run's first op, or the earliest span, mark or region
    shown if one starts before it -- as in the one-file export. (A file left to choose
    would start at its own earliest event, and the pieces would not line up.) Reads each
    rank's meta and spans files once more, not its ops."""
    firsts = [s.t0_ns] if s.t0_ns is not None else []
    for part in parts:
        for table, col in zip(_tables_in_window(*part.mark_tables(), s), ("t_begin_ns", "t_ns", "t_begin_ns")):
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
    """Some ranks' reader.Run cut to the window of PartitionedReport ``s``: ops as windowing.frame_in_window,
    spans / marks / regions overlapping their rank's interval (report._within's rule)."""
    from ..analysis.partitioned.windowing import frame_in_window
    phases = s.window.phases if s.window is not None else None
    if s.bounds is None and phases is None:
        return run
    return type(run)(run.path, frame_in_window(run.frame, s.bounds, phases), run.processes, run.issues,
                     *_tables_in_window(run.spans, run.marks, run.regions, s))


def _tables_in_window(spans, marks, regions, s) -> tuple:
    """(spans, marks, regions) overlapping their rank's interval of PartitionedReport ``s``'s window."""
    from ..analysis.window import in_bounds

    def within(table, begin, end):
        if table is None or not len(table) or s.bounds is None:
            return table
        keep = in_bounds(table["rank"].to_numpy(), table[begin].to_numpy(np.int64), table[end].to_numpy(np.int64),
                         s.bounds)
        return table[keep].reset_index(drop=True)
    return within(spans, "t_begin_ns", "t_end_ns"), within(marks, "t_ns", "t_ns"), within(regions, "t_begin_ns",
                                                                                        "t_end_ns")


def as_report(s) -> SimpleNamespace:
    """The attributes the terminal renderers read, from an analysis.partitioned.PartitionedReport."""
    return SimpleNamespace(steps=s.steps, by_op=s.by_op, by_group=s.by_group, by_phase=s.by_phase,
                           split=s.split if s.split is not None else pd.DataFrame(), skew=s.skew, regions=s.regions,
                           by_module=s.by_module, info=s.info, window=s.window,
                           run=SimpleNamespace(spans=None, processes=s.processes))


def render_partitioned(con, s, top: int = 10, events: bool = False, limit: int | None = None,
                       memory_limit: int | None = None, by: tuple | None = None) -> None:
    """The one-frame report's banner (plus how it was analysed), step, summary (and ``by``'s:
    terminal.render_by) and skew tables, the timeline (when analysed with one) and ``events``
    (at most ``limit``; without, streamed within ``memory_limit``)."""
    rep = as_report(s)
    render_banner(con, rep)
    how = f"{s.executor}, {s.workers} worker{'s' if s.workers != 1 else ''}"
    q = "exact" if s.exact else f"p50/p99 within {s.quantile_error:.1%} (sketched)"
    t = Text()
    t.append(f"  {'analysis':<11}", style="bold")
    t.append(f"partitioned ({how}); percentiles {q}\n")
    con.print(t, end="", overflow="fold")
    if render_nothing_shown(con, rep):
        return
    render_steps(con, rep)
    if s.per_rank_cut and len(s.rank_medians) > 1:
        _render_rank_medians(con, s.rank_medians)
    render_summary(con, rep)
    render_by(con, by)
    render_regions(con, rep)
    render_modules(con, rep)
    render_skew(con, rep, top)
    if s.timeline is not None:
        from .terminal import draw_timeline
        from ..analysis.timeline import timeline_layout
        draw_timeline(con, s.timeline, s.timeline_marks, timeline_layout(con.width, s.info["rank_list"])[0])
    if events and limit is not None:
        from .terminal import render_events
        frame, lo, hi = first_events(s, limit)
        render_events(con, SimpleNamespace(frame=frame, info=s.info), lo, hi, limit)
    elif events:
        stream_events(con, s, memory_limit)


def stream_events(con, s, memory_limit: int | None = None) -> None:
    """Every event of the window, merged from the ranks' files as it is printed
    (analysis.partitioned.events_merge: one chunk per file in memory)."""
    from ..analysis.partitioned import plan_run
    from ..analysis.memory_policy import default_memory_limit
    from ..analysis.partitioned.events_merge import EventWindow, chunk_for, merged_events
    from .terminal import _timeline_range, write_events
    plan = plan_run(s.path)
    lo, hi = _timeline_range(SimpleNamespace(bounds=s.bounds, info=s.info, window=s.window), None, None)
    win = EventWindow(s.info.get("t0_ns") or 0, s.bounds, s.window.phases if s.window is not None else None, lo, hi)
    chunk = chunk_for(memory_limit or default_memory_limit(), sum(len(m) for m in plan.ranks.values()))
    write_events(con, s.ops, merged_events(plan.ranks, plan.refs, win, chunk))


def first_events(s, limit: int):
    """(the first ``limit`` ops in time order over every rank, in the window, as one frame;
    the events' time range relative to t0): a merge of each rank's first ``limit`` (one rank's
    frame in memory at a time)."""
    import numpy as np
    from ..analysis.timeline import event_positions
    from .export_ranks import rank_frames
    from .terminal import _timeline_range
    lo, hi = _timeline_range(SimpleNamespace(bounds=s.bounds, info=s.info, window=s.window), None, None)
    t0 = s.info.get("t0_ns") or 0
    kept = None
    for frame in rank_frames(s):
        mine = frame.iloc[event_positions(frame["t_start_ns"].to_numpy(np.int64) - t0, lo, hi, limit)]
        kept = mine if kept is None else pd.concat([kept, mine], ignore_index=True)
        order = np.argsort(kept["t_start_ns"].to_numpy(np.int64), kind="stable")[:limit]   # ties: rank order
        kept = kept.iloc[order].reset_index(drop=True)
    return (kept if kept is not None else pd.DataFrame()), lo, hi


def _render_rank_medians(con, med) -> None:
    """The per-rank table when the (rank, step) rows were too many to keep (medians come per rank)."""
    from .tables import Column, print_table
    from .fmt import fmt_count, fmt_ns
    con.print()
    cols = [Column("rank"), Column("steps", drop=3), Column("step time", short="step"), Column("compute", drop=2),
            Column("comm"), Column("exposed", short="expo"), Column("ops/step", drop=1, short="ops")]
    rows = [[str(r), fmt_int(x["steps"]), fmt_ns(x["step_ns"]), fmt_ns(x["compute_ns"]), fmt_ns(x["comm_ns"]),
             fmt_ns(x["exposed_ns"]), fmt_count(x["ops"])] for r, x in med.iterrows()]
    print_table(con, cols, rows, title="Per rank (median over its steps)")


def partitioned_json(s) -> dict:
    """The summary numbers (the fields of ``report --json`` this analysis computes)."""
    from ..analysis.report import json_safe, table_records
    st = s.steps
    top_cols = ["op", "group", "seq", "ranks", "spread_ns", "last_rank", "first_rank", "first_start_ns"]
    top = s.skew["top"]
    return json_safe({
        "format": "commtrace-report", "version": 3, "partitioned": True,
        "run": {**s.info, "run_dir": s.path, "ranks": s.ranks, "ops": s.ops, "percentiles_exact": s.exact,
                "quantile_error": s.quantile_error, "executor": s.executor, "workers": s.workers},
        "issues": [str(i) for i in s.issues],
        "by_op": table_records(s.by_op), "by_group": table_records(s.by_group),
        "by_phase": table_records(s.by_phase), "regions": table_records(s.regions),
        "by_module": table_records(s.by_module),
        "split_phases": table_records(s.split),
        "steps": table_records(st.across.head(100_000)) if st is not None else [],
        "steps_per_rank": table_records(st.per_rank.head(1_000_000)) if st is not None else [],
        "outside_steps": table_records(st.outside) if st is not None else [],
        "skew": {"instances": s.skew["instances"], "by_op": table_records(s.skew["by_op"]),
                 "stragglers": table_records(s.skew["stragglers"]),
                 "top": [{c: json_safe(r[c]) if c not in ("op", "group") else str(r[c]) for c in top_cols}
                         for _, r in top.iterrows()] if len(top) else []},
    })
