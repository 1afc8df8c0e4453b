"""``report --events``: every op of the window in time order, one line each.

With ``--limit N``: the first N, a merge of each rank's first N (one rank's frame in
memory at a time); without: a streaming merge of every rank's ops as they are printed
(analysis.partitioned.events_merge: one chunk per file in memory)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from rich.console import Console
from rich.text import Text

from ..analysis.timeline import event_positions, event_rows, timeline_range
from ..trace.rank_ranges import WORLD_STRIDE, rank_name, several_worlds, world_group_name
from .fmt import fmt_bytes, fmt_int, fmt_ns, plain_safe


def render_window_events(con, rep, limit: int | None = None, memory_limit: int | None = None) -> int:
    """The events of report ``rep``'s window (at most ``limit``); returns the events printed."""
    lo, hi = window_range(rep)
    t0 = rep.info.get("t0_ns") or 0
    if limit is None:   # every event, merged from the ranks' files as it is printed
        from ..analysis.memory_policy import default_memory_limit
        from ..analysis.partitioned import plan_run
        from ..analysis.partitioned.events_merge import EventWindow, chunk_for, merged_events
        plan = plan_run(rep.path)
        win = EventWindow(t0, rep.bounds, rep.window.phases, lo, hi)
        chunk = chunk_for(memory_limit or default_memory_limit(), sum(len(m) for m in plan.ranks.values()))
        return write_events(con, rep.ops, merged_events(plan.ranks, plan.refs, win, chunk, plan.worlds),
                            several_worlds(rep.info["rank_list"]))
    from .export import rank_frames
    kept = None    # the first ``limit`` over every rank: a merge of each rank's first ``limit``
    for frame in rank_frames(rep):
        mine = frame.iloc[event_positions(frame["t_start_ns"].to_numpy(np.int64) - t0, lo, hi, limit)]
        kept = mine if kept is None else pd.concat([kept, mine], ignore_index=True)
        order = np.argsort(kept["t_start_ns"].to_numpy(np.int64), kind="stable")[:limit]   # ties: rank order
        kept = kept.iloc[order].reset_index(drop=True)
    ev = event_rows(kept if kept is not None else pd.DataFrame(), t0, lo, hi, limit)
    return write_events(con, len(ev), [ev], several_worlds(rep.info["rank_list"]))


def window_range(rep) -> tuple[int | None, int | None]:
    """The events' time range relative to t0: the window's extent."""
    return timeline_range(rep.bounds, rep.info["t0_ns"] or 0, rep.window)


def write_events(con: Console, count: int, chunks, several: bool = False) -> int:
    """The list of ``count`` events in ``chunks`` (event_rows frames, consumed as printed; ranks as rank
    keys, named by world when the run has ``several``); returns how many were printed."""
    con.print()
    con.print(Text(f"Events ({fmt_int(count)} ops, time after the first op)", style="bold"))
    shapes, group = con.width >= 108, con.width >= 80
    write = con.file.write
    rw = 8 if several else 4
    hdr = (f"{'time':>12}  {'rank':>{rw}}  {'op':<14} " + (f"{'shapes / dtype':<28} " if shapes else "")
           + f"{'bytes':>10}  " + (f"{'group':<8} " if group else "") + f"{'seq':>7}  {'duration':>10}  status")
    write(hdr + "\n")
    printed = 0
    for ev in chunks:
        printed += len(ev)
        cols = {c: ev[c].tolist() for c in ev.columns}
        lines = []
        for i in range(len(ev)):
            dur = cols["duration_ns"][i]
            dur = None if dur is None or dur is pd.NA or dur != dur else dur     # never ended: Int64's NA
            line = f"{fmt_ns(cols['t_rel_ns'][i]):>12}  {rank_name(cols['rank'][i], several):>{rw}}  " \
                f"{plain_safe(cols['op'][i]):<14} "
            if shapes:
                dt = cols["dtype"][i]
                sd = f"{plain_safe(cols['shapes'][i])} {plain_safe(dt) if dt == dt else ''}".strip()
                line += f"{sd:<28} "
            line += f"{fmt_bytes(cols['bytes'][i]):>10}  "
            if group:
                g = cols["group"][i]
                g = world_group_name(str(g), int(cols["rank"][i]) // WORLD_STRIDE) if several else g
                line += f"{plain_safe(g):<8} "
            line += (f"{cols['seq'][i]:>7}  {fmt_ns(dur):>10}  "
                     f"{plain_safe(cols['status'][i])}{_what(cols, i)}\n")
            lines.append(line)
            if len(lines) >= 10_000:
                write("".join(lines))
                lines.clear()
        write("".join(lines))
    return printed


def _what(cols: dict, i: int) -> str:
    """The API and DDP step an event belongs to ("  all_gather_object/object_payload"), if any."""
    parts = [plain_safe(cols[c][i]) for c in ("api", "detail") if c in cols and isinstance(cols[c][i], str)]
    return ("  " + "/".join(parts)) if parts else ""
