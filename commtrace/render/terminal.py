"""The terminal report (rich). Plain text (no colour, ASCII tables) when the output
is not a TTY or NO_COLOR is set. Every string from a trace goes through ``safe``."""
from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.timeline import Timeline, bin_timeline, event_rows
from .fmt import fmt_bw, fmt_bytes, fmt_delta, fmt_int, fmt_ns, fmt_pct, plain_safe, safe

OP_STYLE = {
    "all_reduce": ("green", "R"), "broadcast": ("blue", "B"), "all_gather": ("cyan", "G"),
    "reduce_scatter": ("magenta", "S"), "all_to_all": ("yellow", "A"), "barrier": ("red", "|"),
    "reduce": ("bright_green", "r"), "gather": ("bright_cyan", "g"), "scatter": ("bright_magenta", "s"),
    "send": ("bright_yellow", ">"), "recv": ("bright_blue", "<"),
}
_EXTRA = ["white", "bright_red", "bright_white", "dark_orange", "purple"]


def is_plain(file=None) -> bool:
    file = file or sys.stdout
    try:
        tty = file.isatty()
    except (AttributeError, ValueError):
        tty = False
    return not tty or bool(os.environ.get("NO_COLOR"))


def make_console(width: int | None = None, file=None) -> Console:
    file = file or sys.stdout
    plain = is_plain(file)
    if width is None and plain:
        try:
            width = int(os.environ.get("COLUMNS", "")) or 120
        except ValueError:
            width = 120
    con = Console(file=file, width=width, color_system=None if plain else "auto", no_color=plain,
                  highlight=False, emoji=False, soft_wrap=False, force_terminal=None if not plain else False)
    con.plain = plain  # type: ignore[attr-defined]
    return con


ASCII_SIMPLE = box.Box("    \n    \n -- \n    \n    \n -- \n    \n    \n", ascii=True)


class _Tab(Table):
    """A Table whose columns never wrap (numbers stay on one line)."""

    def add_column(self, *args, **kwargs):
        kwargs.setdefault("no_wrap", True)
        return super().add_column(*args, **kwargs)


def _table(con: Console, title: str | None = None) -> Table:
    """A table; its title goes on its own line above it (so it never wraps to the table width)."""
    if title:
        con.print(Text(title, style="bold"))
    return _Tab(box=ASCII_SIMPLE if getattr(con, "plain", True) else box.SIMPLE_HEAD,
                show_edge=False, pad_edge=False, header_style="bold", padding=(0, 1, 0, 0))


def op_style(op: str, i: int = 0) -> tuple[str, str]:
    return OP_STYLE.get(op, (_EXTRA[i % len(_EXTRA)], "*"))


# -- sections --------------------------------------------------------------------

def render_banner(con: Console, rep) -> None:
    info = rep.info
    cs = info["comm_share"]
    t = Text()
    t.append("commtrace report ", style="bold")
    t.append(plain_safe(info["run_dir"]) + "\n")
    rows = [
        ("command", plain_safe(info["command"]) or "-"),
        ("ranks", f"{info['ranks']} of {info['world_size']}" + (f"  (incomplete: {', '.join(map(str, info['incomplete_ranks']))})" if info["incomplete_ranks"] else "")),
        ("hosts", f"{len(info['hosts'])}: " + plain_safe(", ".join(info["hosts"][:8]) + (" ..." if len(info["hosts"]) > 8 else ""))),
        ("backends", plain_safe(", ".join(info["backends"])) or "-"),
        ("wall time", fmt_ns(info["wall_ns"]) + f"   (traced ops span {fmt_ns(info['span_ns'])})"),
        ("comm share", f"min {fmt_pct(cs['min'])} / mean {fmt_pct(cs['mean'])} / max {fmt_pct(cs['max'])} of wall time per rank"),
        ("totals", f"{fmt_int(info['ops'])} ops, {fmt_bytes(info['bytes'])}"
         + (f", {info['failed']} failed" if info["failed"] else "") + (f", {info['in_flight']} never completed" if info["in_flight"] else "")),
    ]
    for k, v in rows:
        t.append(f"  {k:<11}", style="bold")
        t.append(v + "\n")
    con.print(t, end="")


def _summary_table(con, df, title, key_names):
    tab = _table(con, title)
    for k in key_names:
        tab.add_column(k)
    for c in ("count", "bytes", "mean", "p50", "p99", "algbw", "busbw", "share", "cv"):
        tab.add_column(c, justify="right")
    flat = df.reset_index()
    for r in flat.itertuples(index=False):
        d = r._asdict()
        keys = [safe(d[k]) for k in key_names]
        op = str(d.get("op", ""))
        if "op" in key_names:
            keys[key_names.index("op")] = f"[{op_style(op)[0]}]{safe(op)}[/]" if not con.plain else safe(op)
        tab.add_row(*keys, fmt_int(d["count"]), fmt_bytes(d["bytes"]), fmt_ns(d["mean_ns"]),
                    fmt_ns(d["p50_ns"]), fmt_ns(d["p99_ns"]), fmt_bw(d["algbw"]), fmt_bw(d["busbw"]),
                    fmt_pct(d["share"]), "-" if d["cv"] != d["cv"] else f"{d['cv']:.2f}")
    con.print(tab)


def render_summary(con: Console, rep) -> None:
    con.print()
    _summary_table(con, rep.by_op, "Per op", ["op"])
    con.print(Text("count: collectives (matched across ranks); bytes: all ranks; durations per rank; bandwidth per collective with the slowest rank (nccl-tests); cv: per-rank time variation", style="dim"))
    if len(rep.by_group.reset_index()["group"].unique()) > 1:
        con.print()
        _summary_table(con, rep.by_group, "Per process group", ["group", "group_desc", "op"])
    if rep.by_phase is not None and len(rep.by_phase):
        con.print()
        _summary_table(con, rep.by_phase, "Per phase", ["phase", "op"])
    it = rep.by_iteration
    if it is not None and len(it):
        con.print()
        comm = it["comm_ns"].to_numpy(dtype=float)
        con.print(Text(f"Per iteration: {len(it)} steps; communication per step (mean over ranks): "
                       f"mean {fmt_ns(comm.mean())}, p50 {fmt_ns(np.percentile(comm, 50))}, "
                       f"p99 {fmt_ns(np.percentile(comm, 99))}, max {fmt_ns(comm.max())}", style="bold"))
        shown = it if len(it) <= 12 else it.sort_values("comm_ns", ascending=False).head(8).sort_index()
        tab = _table(con, None if len(it) <= 12 else "slowest steps")
        overlap = "overlap_pct" in it.columns
        cols = ["iteration", "ops", "bytes", "comm time", "span", "slowest rank"]
        if overlap:
            cols += ["backward", "grad comm", "hidden", "exposed", "hidden %"]
        for c in cols:
            tab.add_column(c, justify="right")
        for i, r in shown.iterrows():
            cells = [str(i), fmt_int(r["ops"]), fmt_bytes(r["bytes"]), fmt_ns(r["comm_ns"]), fmt_ns(r["span_ns"]),
                     str(int(r["slowest_rank"]))]
            if overlap:
                pct = r["overlap_pct"]
                cells += [fmt_ns(r["backward_ns"]), fmt_ns(r["grad_comm_ns"]), fmt_ns(r["overlapped_ns"]),
                          fmt_ns(r["exposed_ns"]), "-" if pd.isna(pct) else f"{pct:.0f}%"]
            tab.add_row(*cells)
        con.print(tab)
        if overlap:
            con.print(Text("hidden: gradient all_reduce time while gradients were still being computed (until the last bucket's launch); "
                           "exposed: all_reduce time after that, which the step waits for (mean over ranks)", style="dim"))


def render_skew(con: Console, rep, top: int = 10) -> None:
    sk = rep.skew
    con.print()
    if not sk["instances"]:
        con.print(Text("Skew: no collective was called by two or more ranks.", style="bold"))
        return
    tab = _table(con, f"Arrival skew (last minus first caller, {fmt_int(sk['instances'])} collectives)")
    for c in ("op", "count", "mean", "p50", "p99", "max"):
        tab.add_column(c, justify="right" if c != "op" else "left")
    for op, r in sk["by_op"].iterrows():
        tab.add_row(safe(op), fmt_int(r["count"]), fmt_ns(r["mean_ns"]), fmt_ns(r["p50_ns"]), fmt_ns(r["p99_ns"]), fmt_ns(r["max_ns"]))
    con.print(tab)
    st = sk["stragglers"]
    if len(st):
        tab = _table(con, "Top stragglers (arrived last; by time the others waited)")
        for c in ("rank", "last in", "share", "others waited", "mean spread"):
            tab.add_column(c, justify="right")
        for rank, r in st.head(top).iterrows():
            tab.add_row(str(rank), fmt_int(r["last"]), fmt_pct(r["share_last"]), fmt_ns(r["wait_ns"]), fmt_ns(r["mean_spread_ns"]))
        con.print(tab)
    t0 = rep.info["t0_ns"] or 0
    tab = _table(con, "Largest spreads")
    for c in ("time", "op", "group", "seq", "spread", "last rank", "first rank"):
        tab.add_column(c, justify="right" if c not in ("op", "group") else "left")
    for _, r in sk["top"].head(top).iterrows():
        tab.add_row(fmt_ns(r["first_start_ns"] - t0), safe(r["op"]), safe(r["group"]), str(r["seq"]), fmt_ns(r["spread_ns"]),
                    str(r["last_rank"]), str(r["first_rank"]))
    con.print(tab)


def render_timeline(con: Console, rep, t_from=None, t_to=None) -> Timeline:
    label_w = max(len(f"rank {r}") for r in rep.info["rank_list"] or [0]) + 1
    width = max(int(con.width) - label_w - 2, 10)
    tl = bin_timeline(rep.run.frame, rep.info["t0_ns"] or 0, width, t_from, t_to, rep.arrays)
    con.print()
    con.print(Text(f"Timeline  {fmt_ns(tl.t_from_ns)} .. {fmt_ns(tl.t_to_ns)} after the first op "
                   f"({fmt_ns((tl.t_to_ns - tl.t_from_ns) / tl.width)} per column)", style="bold"))
    styles = [op_style(op, i) for i, op in enumerate(tl.ops)]
    for li, rank in enumerate(tl.ranks):
        line = Text(f"rank {rank}".ljust(label_w) + "|")
        cells, fill = tl.cells[li], tl.fill[li]
        # Group equal cells into runs: one append per run keeps this fast.
        keyv = np.where(cells < 0, -1, cells * 2 + (fill >= 0.5))
        cuts = np.flatnonzero(np.diff(keyv)) + 1
        for lo, hi in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(keyv)]))):
            c = int(cells[lo])
            n = hi - lo
            if c < 0:
                line.append(" " * n)
                continue
            color, letter = styles[c]
            strong = fill[lo] >= 0.5
            if con.plain:
                line.append((letter if strong else ".") * n)
            else:
                line.append(("█" if strong else "▒") * n, style=color)
        line.append("|")
        con.print(line, no_wrap=True, overflow="crop")
    axis = Text(" " * label_w + "^" + fmt_ns(tl.t_from_ns))
    end_lbl = fmt_ns(tl.t_to_ns) + "^"
    axis.append(" " * max(1, label_w + tl.width + 2 - len(axis.plain) - len(end_lbl)) + end_lbl)
    con.print(axis, no_wrap=True, overflow="crop")
    legend = Text("legend: ")
    for i, op in enumerate(tl.ops):
        color, letter = styles[i]
        if con.plain:
            legend.append(f"{letter} {plain_safe(op)}   ")
        else:
            legend.append("█", style=color)
            legend.append(f" {plain_safe(op)}   ")
    legend.append("(. = less than half the column)" if con.plain else "(▒ = less than half the column)")
    con.print(legend)
    return tl


def render_events(con: Console, rep, t_from=None, t_to=None, limit=None) -> int:
    ev = event_rows(rep.run.frame, rep.info["t0_ns"] or 0, t_from, t_to, limit)
    con.print()
    con.print(Text(f"Events ({fmt_int(len(ev))} ops, time after the first op)", style="bold"))
    write = con.file.write
    hdr = f"{'time':>12}  {'rank':>4}  {'op':<14} {'shapes / dtype':<28} {'bytes':>10}  {'group':<8} {'seq':>7}  {'duration':>10}  status"
    write(hdr + "\n")
    cols = {c: ev[c].tolist() for c in ev.columns}
    lines = []
    for i in range(len(ev)):
        sd = f"{plain_safe(cols['shapes'][i])} {plain_safe(cols['dtype'][i]) if cols['dtype'][i] == cols['dtype'][i] else ''}".strip()
        dur = cols["duration_ns"][i]
        lines.append(f"{fmt_ns(cols['t_rel_ns'][i]):>12}  {cols['rank'][i]:>4}  {plain_safe(cols['op'][i]):<14} {sd:<28} "
                     f"{fmt_bytes(cols['bytes'][i]):>10}  {plain_safe(cols['group'][i]):<8} {cols['seq'][i]:>7}  "
                     f"{fmt_ns(None if dur is None or dur != dur else dur):>10}  {plain_safe(cols['status'][i])}\n")
        if len(lines) >= 10_000:
            write("".join(lines))
            lines.clear()
    write("".join(lines))
    return len(ev)


def render_report(con: Console, rep, *, t_from=None, t_to=None, events=False, limit=None, top=10) -> None:
    render_banner(con, rep)
    if rep.info["ops"] == 0:
        con.print(Text("\nNo communication was recorded in this run."))
        return
    render_summary(con, rep)
    render_skew(con, rep, top)
    render_timeline(con, rep, t_from, t_to)
    if events:
        render_events(con, rep, t_from, t_to, limit)


# -- compare ----------------------------------------------------------------------

def render_compare(con: Console, cmp: dict) -> None:
    """One table: for every op (phase, ...) a BASE row then one row per EXP, each stat with
    its delta vs BASE underneath (green: faster, red: slower)."""
    table = cmp["table"]
    runs = cmp["runs"]
    by = cmp["by"]
    con.print(Text("commtrace compare  (per-rank op durations; change vs BASE below each value)", style="bold"))
    for i, name in enumerate(runs):
        con.print(Text(f"  {'BASE' if i == 0 else f'EXP{i}':<5} {plain_safe(name)}"))
    stats = [("count", fmt_int), ("bytes", fmt_bytes), ("mean", fmt_ns), ("p50", fmt_ns), ("p90", fmt_ns),
             ("p95", fmt_ns), ("p99", fmt_ns)]
    tab = _table(con)
    tab.show_lines = False
    for b in by:
        tab.add_column(b)
    tab.add_column("run")
    for stat, _ in stats:
        tab.add_column(stat, justify="right")
    keys = list(table.index)
    for ki, key in enumerate(keys):
        row = table.loc[key]
        kt = key if isinstance(key, tuple) else (key,)
        for i, name in enumerate(runs):
            cells = [safe(k) if i == 0 else "" for k in kt] + ["BASE" if i == 0 else f"EXP{i}"]
            for stat, f in stats:
                v = f(row[(name, stat)])
                if i:
                    d = row[(name, stat + "_delta")]
                    txt = fmt_delta(d)
                    if not con.plain and d == d and abs(d) >= 1 and stat not in ("count", "bytes"):
                        txt = f"[{'green' if d < 0 else 'red'}]{txt}[/]"
                    v = f"{v}\n{txt}"
                cells.append(v)
            tab.add_row(*cells, end_section=(i == len(runs) - 1 and ki < len(keys) - 1))
    con.print()
    con.print(tab)
