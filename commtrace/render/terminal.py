"""The terminal report (rich): plain (no colour) when not a TTY or NO_COLOR is set, the same layout
either way. Trace strings go through ``plain_safe``/``safe``; tables fit the width (render.tables).
"""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np
from rich.console import Console
from rich.text import Text

from ..trace.rank_ranges import fmt_rank_keys, rank_name, several_worlds
from ..analysis.arrays import equal_runs
from ..analysis.timeline import Timeline, timeline_layout
from .fmt import fmt_bw, fmt_bytes, fmt_count, fmt_int, fmt_ns, fmt_pct, plain_safe
from ..trace.schema import op_kind
from .tables import Column, print_table, shorten

_EXTRA = ["white", "bright_red", "bright_white", "dark_orange", "purple"]   # ops schema.OP_KINDS gives none
MARK_SYMBOLS = "123456789abcdefghijklmnopqrstuvwxyz"


def _isatty(file) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False


def console_width(file=None) -> int:
    """--width, else the terminal's width, else COLUMNS, else 120: never depends on colour."""
    if _isatty(file or sys.stdout):
        return shutil.get_terminal_size((120, 24)).columns
    try:
        return int(os.environ.get("COLUMNS", "")) or 120
    except ValueError:
        return 120


def make_console(width: int | None = None, file=None) -> Console:
    file = file or sys.stdout
    plain = not _isatty(file) or bool(os.environ.get("NO_COLOR"))
    con = Console(file=file, width=max(int(width or console_width(file)), 40), color_system=None if plain else "auto",
                  no_color=plain, highlight=False, emoji=False, soft_wrap=False,
                  force_terminal=None if not plain else False)
    con.plain = plain  # type: ignore[attr-defined]
    return con


def op_style(op: str, i: int = 0) -> tuple[str, str]:
    kind = op_kind(op)
    return kind.color or _EXTRA[i % len(_EXTRA)], kind.letter


# -- banner ----------------------------------------------------------------------

def render_banner(con: Console, rep) -> None:
    info = rep.info
    cs = info["comm_share"]
    t = Text()
    t.append("commtrace report ", style="bold")
    t.append(plain_safe(info["run_dir"]) + "\n")
    windowed = not rep.window.whole_run
    of = "of the window per rank" if windowed else (
        "of the time its records cover per rank (bounded trace)" if info.get("coverage") else "of wall time per rank")
    rows = [
        ("command", plain_safe(info["command"]) or "-"),
        ("ranks", _ranks_text(info)),
        *([("ended", _endings_text(info))] if info.get("endings") else []),
        ("hosts", f"{len(info['hosts'])}: " + plain_safe(", ".join(info["hosts"][:8]) + (" ..." if len(info["hosts"]) > 8 else ""))),
        *clock_rows(info.get("clocks")),
        ("backends", plain_safe(", ".join(info["backends"])) or "-"),
        ("window", rep.window.describe(fmt_ns) + (f"  ({fmt_ns(info['window_ns'])})" if info.get("window_ns") else "")),
        *([("coverage", info["coverage"])] if info.get("coverage") else []),  # bounded: what the files hold
        ("wall time", fmt_ns(info["wall_ns"]) + f"   (ops shown span {fmt_ns(info['span_ns'])})"),
        ("comm share", f"min {fmt_pct(cs['min'])} / mean {fmt_pct(cs['mean'])} / max {fmt_pct(cs['max'])} {of}"),
    ]
    st = rep.steps
    if st is not None and st.shown:
        a = st.across
        ms = a["micro_steps"].to_numpy()
        micro = f"{int(ms[0])} micro-step{'s' if ms[0] != 1 else ''} each" if (ms == ms[0]).all() \
            else f"{int(ms.min())}-{int(ms.max())} micro-steps"
        rows.append(("steps", f"{st.shown} of {st.total_steps} optimizer steps shown, {micro}"))
        rows.append(("per step", f"median {fmt_ns(np.median(a['step_ns']))}: comm {fmt_ns(np.median(a['comm_ns']))},"
                     f" exposed {fmt_ns(np.median(a['exposed_ns']))}"))
    rows.append(("totals", f"{fmt_int(info['ops'])} ops, {fmt_bytes(info['bytes'])}"
                 + (f", {info['failed']} failed" if info["failed"] else "")
                 + (f", {info['in_flight']} never completed" if info["in_flight"] else "")))
    _print_rows(con, rows, t)


def _print_rows(con: Console, rows: list[tuple[str, str]], t: Text | None = None) -> None:
    """Banner rows ("  label      text") after ``t``."""
    t = t or Text()
    for k, v in rows:
        t.append(f"  {k:<11}", style="bold")
        t.append(v + "\n")
    con.print(t, end="", overflow="fold")


# -- clocks: per host, how its ranks' clocks were put on rank 0's and how well --------

_CLOCK_NAMES = {"reference": "reference (rank 0)", "same-host": "rank 0's clock (same host)",
                "gloo-pingpong": "gloo ping-pong", "mpi-pingpong": "MPI ping-pong",
                "wall-clock": "wall clock (NTP; error unknown)", "unaligned": "not aligned (no rank 0 trace)"}
_CLOCK_HOSTS = 4                  # more hosts: one row, per method the hosts and the worst bound
_BEYOND_SHOWN_NS = 1_000_000_000  # a rank that ran on after its last measurement (no exit measurement)


def _methods_text(methods: list[list[str]]) -> str:
    """Readable method names (``+`` joins the methods one rank's offset combines)."""
    return ", ".join(" + ".join(_CLOCK_NAMES.get(m, m) for m in combo) for combo in methods)


def clock_rows(clocks: list[dict] | None) -> list[tuple[str, str]]:
    """The banner's rows for ``Report.info["clocks"]``; none for one host (it is rank 0's clock)."""
    if not clocks or len(clocks) < 2:
        return []
    if len(clocks) > _CLOCK_HOSTS:
        by_method: dict[str, list[dict]] = {}
        for h in clocks:
            by_method.setdefault(_methods_text(h["methods"]), []).append(h)
        parts = []
        for text, hosts in by_method.items():
            known = [h for h in hosts if h.get("uncertainty_ns") is not None and h.get("measurements")]
            parts.append(f"{len(hosts)} host{'s' if len(hosts) > 1 else ''} {text}")
            if known:
                worst = max(known, key=lambda h: h["uncertainty_ns"])
                parts[-1] += f" (worst ±{fmt_ns(worst['uncertainty_ns'])}, {plain_safe(worst['host'])})"
        return [("clocks", "; ".join(parts))]
    rows = []
    for h in clocks:
        text = _methods_text(h["methods"])
        if h.get("measurements") and h.get("uncertainty_ns") is not None:
            text += (f", within ±{fmt_ns(h['uncertainty_ns'])} ({h['measurements']} measurements, best round "
                     f"trip {fmt_ns(h.get('rtt_ns'))}")
            if (h.get("beyond_ns") or 0) >= _BEYOND_SHOWN_NS:
                text += f"; runs {fmt_ns(h['beyond_ns'])} past the last one"
            text += ")"
        rows.append(("" if rows else "clocks", f"{plain_safe(h['host'])}: {text}"))
    return rows


# -- steps -----------------------------------------------------------------------

STEP_COLUMNS = [Column("step", drop=0), Column("micro", drop=4), Column("step time", drop=0, short="step"),
                Column("compute", drop=3, short="comp"), Column("comm", drop=0), Column("exposed", drop=0, short="expo"),
                Column("hidden", drop=5), Column("ops", drop=2), Column("bytes", drop=1),
                Column("slowest", drop=6, short="slow")]


def _ranks_text(info: dict) -> str:
    """The banner's ranks: "8 of 8", or with several worlds "4 in 2 worlds of 2 (w0 ... w1 ...)"."""
    worlds = info.get("worlds")
    restarts = "".join(f"; w{n}: torchrun restart {c}" for n, c in (info.get("world_restarts") or {}).items())
    return f"{info['ranks']} of {info['world_size']}" if not worlds else \
        f"{info['ranks']} in {len(worlds)} worlds ({fmt_rank_keys(info['rank_list'])}{restarts})"


_ENDINGS_SHOWN = 3   # more kinds of ending: `commtrace check` lists them
_ENDING_CHARS = 100  # an exception's message can run to a paragraph: check prints it whole


def _endings_text(info: dict) -> str:
    """The banner's ranks that did not exit normally, one part per way of ending:
    "rank 1: raised RuntimeError: boom; rank 4-7: trace ends abruptly (...)"."""
    ranks_of: dict[str, list] = {}
    for r, text in info["endings"].items():
        ranks_of.setdefault(text, []).append(r)
    several = several_worlds(info["rank_list"])
    rank = "" if several else "rank "   # "w1:r0-3" names itself
    parts = [f"{rank}{fmt_rank_keys(ranks, several)}: {shorten(plain_safe(text), _ENDING_CHARS)}"
             for text, ranks in ranks_of.items()]
    more = len(parts) - _ENDINGS_SHOWN
    return "; ".join(parts[:_ENDINGS_SHOWN]) + (f"; {more} more (`commtrace check` lists them)" if more > 0 else "")


def _step_row(label, r, several: bool = False) -> list[str]:
    return [str(label), fmt_count(r["micro_steps"]), fmt_ns(r["step_ns"]), fmt_ns(r["compute_ns"]),
            fmt_ns(r["comm_ns"]), fmt_ns(r["exposed_ns"]),
            fmt_pct((r["comm_ns"] - r["exposed_ns"]) / r["comm_ns"], 0) if r["comm_ns"] else "-",
            fmt_count(r["ops"]), fmt_bytes(r["bytes"]),
            f"rank {rank_name(r['slowest_rank'], several)}"]


def render_steps(con: Console, rep, max_rows: int = 12) -> None:
    st = rep.steps
    if st is None:
        if rep.compute_spans:
            con.print()
            con.print(Text("Steps: no optimizer step was recorded (steps are counted at torch.optim "
                           "optimizer steps).", style="dim"), overflow="fold")
        return
    con.print()
    a = st.across
    if not len(a):
        con.print(Text("Steps: none inside this window.", style="bold"))
    else:
        slowest = np.argsort(-a["step_ns"].to_numpy(np.int64), kind="stable")[:max_rows - 4]
        shown = a if len(a) <= max_rows else a.iloc[sorted(slowest)]   # by position: each world has a step 1
        title = f"Steps ({len(a)}" + (f"; the {len(shown)} slowest" if len(shown) < len(a) else "") + ")"
        several = several_worlds(rep.info["rank_list"])
        rows = [_step_row(f"{r['world']}:{i}" if several else i, r, several) for i, r in shown.iterrows()]
        if len(a) > 1:   # the median of each column
            med = {c: float(np.median(a[c])) for c in ("micro_steps", "step_ns", "compute_ns", "comm_ns",
                                                       "exposed_ns", "ops", "bytes")}
            row = _step_row("median", {**med, "slowest_rank": 0})
            comm, exposed = a["comm_ns"].to_numpy(float), a["exposed_ns"].to_numpy(float)
            hidden = (comm - exposed)[comm > 0] / comm[comm > 0]
            row[6] = fmt_pct(np.median(hidden), 0) if len(hidden) else "-"
            row[-1] = ""
            rows.append(row)
        print_table(con, STEP_COLUMNS, rows, title=title,
                    note="per rank, mean over ranks (step time: the slowest rank); comm: time with any op in "
                         "progress; exposed: comm while not computing; hidden: share of comm overlapped by compute")
    out = st.outside
    if len(out) and out["ops"].sum():
        con.print()
        cols = [Column("outside steps", right=False), Column("ops"), Column("bytes", drop=1),
                Column("comm", drop=0), Column("ranks", drop=2)]
        rows = [[w, fmt_int(r["ops"]), fmt_bytes(r["bytes"]), fmt_ns(r["comm_ns"]), fmt_int(r["ranks"])]
                for w, r in out.iterrows() if r["ops"]]
        print_table(con, cols, rows, note="ops: all ranks; comm: mean per rank")
    per = st.per_rank
    if len(per) and per["rank"].nunique() > 1:
        g = per.groupby("rank")
        _render_rank_medians(con, g[["step_ns", "compute_ns", "comm_ns", "exposed_ns", "ops"]].median()
                             .assign(steps=g.size()))


# -- op tables -------------------------------------------------------------------

# Dropped first when space runs out: cv, algbw, p99, p50, share, then the key columns that only
# refine a row (detail, group_desc), then busbw, bytes, mean.
_SUMMARY_COLUMNS = [Column("colls", drop=0), Column("bytes", drop=2), Column("mean", drop=1),
                    Column("p50", drop=6), Column("p99", drop=7), Column("busbw", drop=3),
                    Column("algbw", drop=8), Column("share", drop=5), Column("cv", drop=9)]


OBSERVED_MARK = "*"   # after a bandwidth some of whose collectives' ends were observed by polling


def _summary_table(con, df, title, key_names, note=None, left_out: bool = False):
    """``left_out``: the note also counts the collectives left out of bandwidth (a table whose rows
    hold each collective once: per op)."""
    flat = df.reset_index()
    if "rank" in key_names:   # rank keys, as every view names them ("w1:r0" in a run of several worlds)
        several = several_worlds(flat["rank"])
        flat["rank"] = [rank_name(k, several) for k in flat["rank"]]
    rows, styles, marked = [], [], False
    for r in flat.itertuples(index=False):
        d = r._asdict()
        keys = [plain_safe(d[k]) for k in key_names]
        mark = OBSERVED_MARK if d.get("observed", 0) > 0 else ""
        marked = marked or bool(mark)
        rows.append(keys + [fmt_int(d["collectives"]), fmt_bytes(d["bytes"]), fmt_ns(d["mean_ns"]),
                            fmt_ns(d["p50_ns"]), fmt_ns(d["p99_ns"]), _bw_cell(d["busbw"], mark),
                            _bw_cell(d["algbw"], mark), fmt_pct(d["share"]),
                            "-" if d["cv"] != d["cv"] else f"{d['cv']:.2f}"])
        st = [None] * len(rows[-1])
        if "op" in key_names:
            st[key_names.index("op")] = op_style(str(d.get("op", "")))[0]
        styles.append(st)
    keys = [Column(k, right=False, text=k in ("group", "group_desc", "detail", "phase"),
                   drop=0 if k in ("op", "phase", "group") else 4) for k in key_names]
    notes = [note] if note else []
    if marked:
        notes.append(f"{OBSERVED_MARK}: includes collectives whose end was observed by polling (an upper bound on "
                     "their time, e.g. gloo's send/recv): the bandwidth is a lower bound")
    untimed = int(df["untimed"].sum()) if left_out and "untimed" in df else 0
    if untimed:
        notes.append(f"busbw/algbw leave out {fmt_int(untimed)} collective(s) without their slowest rank's time "
                     "(an op failed or never ended, or a rank's op is missing)")
    print_table(con, keys + _SUMMARY_COLUMNS, rows, title=title, styles=styles, note="; ".join(notes) or None)


def _bw_cell(bps, mark: str) -> str:
    text = fmt_bw(bps)
    return text if text == "-" else text + mark


SUMMARY_NOTE = ("colls: collectives (one per call across the ranks); bytes: all ranks; mean/p50/p99: per-op "
                "durations; busbw/algbw: nccl-tests conventions, slowest rank; share: of summed op time; "
                "cv: per-rank time variation")


def render_summary(con: Console, rep) -> None:
    con.print()
    _summary_table(con, rep.by_op, "Per op", ["op"], note=SUMMARY_NOTE, left_out=True)
    if len(rep.by_group) and rep.by_group.reset_index()["group"].nunique() > 1:
        con.print()
        _summary_table(con, rep.by_group, "Per process group", ["group", "group_desc", "op"])
    if rep.by_phase is not None and len(rep.by_phase):
        con.print()
        keys = list(rep.by_phase.index.names)
        note = "each op under its own rank's phase"
        if len(rep.split):
            ex = rep.split.iloc[0]
            note += (f"; {fmt_int(len(rep.split))} collective(s) ran in different phases on different ranks "
                     f"(e.g. {plain_safe(ex['op'])} seq {ex['seq']}: {plain_safe(ex['by_rank'])}) and count "
                     "under each")
        _summary_table(con, rep.by_phase, "Per phase", keys, note=note)


def render_regions(con: Console, rep) -> None:
    reg = rep.regions
    if reg is None or not len(reg):
        return
    con.print()
    cols = [Column("region", right=False, text=True), Column("ranks", drop=4), Column("entries", drop=3),
            Column("time"), Column("comm"), Column("comm %", short="comm%"), Column("ops", drop=2),
            Column("bytes", drop=1)]
    rows = [[plain_safe(label), fmt_int(r["ranks"]), fmt_int(r["entries"]), fmt_ns(r["time_ns"]),
             fmt_ns(r["comm_ns"]), fmt_pct(r["comm_share"]), fmt_int(r["ops"]), fmt_bytes(r["bytes"])]
            for label, r in reg.iterrows()]
    print_table(con, cols, rows, title="Regions (commtrace.region)",
                note="time and comm: mean per rank that entered the region; ops and bytes: all ranks")


def render_modules(con: Console, rep) -> None:
    mods = getattr(rep, "by_module", None)
    if mods is None or not len(mods):
        return
    con.print()
    cols = [Column("module", right=False, text=True), Column("phase", right=False, text=True),
            Column("ranks", drop=4), Column("ops", drop=2), Column("bytes", drop=1), Column("comm"),
            Column("exposed", short="expo"), Column("expo %", drop=3, short="ex%")]
    rows = [[plain_safe(module), plain_safe(phase), fmt_int(r["ranks"]), fmt_int(r["ops"]), fmt_bytes(r["bytes"]),
             fmt_ns(r["comm_ns"]), fmt_ns(r["exposed_ns"]), fmt_pct(r["exposed_share"])]
            for (module, phase), r in mods.iterrows()]
    print_table(con, cols, rows, title="Per module (innermost nn.Module when the op was called)",
                note="comm and exposed: mean per rank with ops of the row; ops and bytes: all ranks")


# -- skew ------------------------------------------------------------------------

def render_skew(con: Console, rep, top: int = 10) -> None:
    sk = rep.skew
    con.print()
    if not sk["instances"]:
        con.print(Text("Skew: no collective was called by two or more ranks.", style="bold"))
        return
    rows = [[plain_safe(op), fmt_int(r["collectives"]), fmt_ns(r["mean_ns"]), fmt_ns(r["p50_ns"]),
             fmt_ns(r["p99_ns"]), fmt_ns(r["max_ns"])] for op, r in sk["by_op"].iterrows()]
    print_table(con, [Column("op", right=False), Column("colls"), Column("mean"), Column("p50", drop=2),
                      Column("p99", drop=1), Column("max")], rows,
                title=f"Arrival skew (last minus first caller, {fmt_int(sk['instances'])} collectives)")
    st = sk["stragglers"]
    if len(st):
        several = several_worlds(st.index)
        rows = [[rank_name(rank, several), fmt_int(r["last"]), fmt_pct(r["share_last"]), fmt_ns(r["wait_ns"]),
                 fmt_ns(r["mean_spread_ns"])] for rank, r in st.head(top).iterrows()]
        print_table(con, [Column("rank"), Column("last in"), Column("share", drop=1), Column("others waited"),
                          Column("mean spread", drop=2)], rows,
                    title="Top stragglers (arrived last; by time the others waited)")
    t0 = rep.info["t0_ns"] or 0
    several = several_worlds(rep.info["rank_list"])
    rows = [[fmt_ns(r["first_start_ns"] - t0), plain_safe(r["op"]), plain_safe(r["group"]), str(r["seq"]),
             fmt_ns(r["spread_ns"]), rank_name(r["last_rank"], several), rank_name(r["first_rank"], several)]
            for _, r in sk["top"].head(top).iterrows()]
    print_table(con, [Column("time"), Column("op", right=False), Column("group", right=False, text=True, drop=3),
                      Column("seq", drop=2), Column("spread"), Column("last rank", short="last"),
                      Column("first rank", short="first", drop=1)], rows, title="Largest spreads")


# -- timeline --------------------------------------------------------------------

def draw_timeline(con: Console, tl: Timeline, marks, label_w: int) -> None:
    """The lanes of ``tl``, the lane of the window's ``marks``, the axis and the legend."""
    con.print()
    con.print(Text(f"Timeline  {fmt_ns(tl.t_from_ns)} .. {fmt_ns(tl.t_to_ns)} after the first op "
                   f"({fmt_ns((tl.t_to_ns - tl.t_from_ns) / tl.width)} per column)", style="bold"), overflow="fold")
    styles = [op_style(op, i) for i, op in enumerate(tl.ops)]
    several = several_worlds(tl.ranks)
    for li, rank in enumerate(tl.ranks):
        line = Text(f"rank {rank_name(rank, several)}".ljust(label_w) + "|")
        cells, fill = tl.cells[li], tl.fill[li]
        # Equal cells in runs: one append per run keeps this fast.
        for k, a, b in equal_runs(np.where(cells < 0, -1, cells * 2 + (fill >= 0.5))):
            if k < 0:
                line.append(" " * (b - a))
                continue
            color, letter = styles[k // 2]
            strong = k % 2 == 1
            line.append((letter if strong else ".") * (b - a), style=("bold " + color) if strong else color)
        line.append("|")
        con.print(line, no_wrap=True, overflow="crop")
    marks = _render_mark_lane(con, marks, tl, label_w)
    axis = Text(" " * label_w + "^" + fmt_ns(tl.t_from_ns))
    end_lbl = fmt_ns(tl.t_to_ns) + "^"
    axis.append(" " * max(1, label_w + tl.width + 2 - len(axis.plain) - len(end_lbl)) + end_lbl)
    con.print(axis, no_wrap=True, overflow="crop")
    legend = Text("legend: ")
    for i, op in enumerate(tl.ops):
        color, letter = styles[i]
        legend.append(letter, style="bold " + color)
        legend.append(f" {plain_safe(op)}   ")
    legend.append("(. = op covers less than half the column)")
    con.print(legend, overflow="fold")
    if marks:
        con.print(Text(f"marks (rank {rank_name(marks[0], several)}): " + "   ".join(marks[1:])), overflow="fold")


def _render_mark_lane(con: Console, marks, tl: Timeline, label_w: int) -> list:
    """A lane of numbered marks (commtrace.mark) under the ranks; returns [rank, legend entries...].
    Marks are those of the lowest rank that made any (usually every rank makes the same)."""
    if marks is None or not len(marks):
        return []
    rank = int(marks["rank"].min())
    m = marks[marks["rank"] == rank]
    rel = m["t_ns"].to_numpy(np.int64) - tl.t0_ns
    inside = (rel >= tl.t_from_ns) & (rel <= tl.t_to_ns)
    m, rel = m[inside], rel[inside]
    if not len(m):
        return []
    dt = (tl.t_to_ns - tl.t_from_ns) / tl.width
    col = np.minimum(((rel - tl.t_from_ns) / dt).astype(np.int64), tl.width - 1)
    lane = [" "] * tl.width
    legend = []
    for i, (c, label, t) in enumerate(zip(col.tolist(), m["label"].tolist(), rel.tolist())):
        sym = MARK_SYMBOLS[i] if i < len(MARK_SYMBOLS) else "*"
        lane[c] = sym if lane[c] == " " else "*"
        if i < len(MARK_SYMBOLS):
            legend.append(f"{sym} {plain_safe(label)} ({fmt_ns(t)})")
    line = Text("marks".ljust(label_w) + "|" + "".join(lane) + "|")
    con.print(line, no_wrap=True, overflow="crop")
    if len(m) > len(MARK_SYMBOLS):
        legend.append(f"... {len(m) - len(MARK_SYMBOLS)} more (commtrace.load(run, table='marks'))")
    return [rank, *legend]


def render_nothing_shown(con: Console, rep) -> bool:
    """Says so and returns True when the report has no op and no step to show."""
    if rep.info["ops"] or (rep.steps is not None and rep.steps.shown):
        return False
    lost = sum(int(p.get("lost_records") or 0) for p in rep.processes)
    if lost:
        con.print(Text(f"\nNo readable communication: {fmt_int(lost)} op record(s) could not be read."))
    else:
        con.print(Text("\nNo communication was recorded in this "
                       + ("window." if not rep.window.whole_run else "run.")))
    return True


def render_report(con: Console, rep, *, events=False, limit=None, top=10, memory_limit=None, by=None) -> None:
    """Banner, tables, the timeline (if analysed with one) and ``events`` (at most ``limit``; without,
    streamed within ``memory_limit``)."""
    render_banner(con, rep)
    if not rep.whole:
        how = f"{rep.executor}, {rep.workers} worker{'s' if rep.workers != 1 else ''}"
        q = "exact" if rep.exact else f"p50/p99 within {rep.quantile_error:.1%} (sketched)"
        _print_rows(con, [("analysis", f"partitioned ({how}); percentiles {q}")])
    if render_nothing_shown(con, rep):
        return
    render_steps(con, rep)
    if rep.per_rank_cut and len(rep.rank_medians) > 1:
        _render_rank_medians(con, rep.rank_medians)
    render_summary(con, rep)
    if by is not None:   # report --by: (keys, summary table over them)
        con.print()
        _summary_table(con, by[1], "By " + ", ".join(by[0]), list(by[0]), note=SUMMARY_NOTE)
    render_regions(con, rep)
    render_modules(con, rep)
    render_skew(con, rep, top)
    if rep.timeline is not None:
        draw_timeline(con, rep.timeline, rep.timeline_marks, timeline_layout(con.width, rep.info["rank_list"])[0])
    if events:
        from .events import render_window_events
        render_window_events(con, rep, limit, memory_limit)


def _render_rank_medians(con, med) -> None:
    """The per-rank table: per rank the median of its steps (``med``: one row per rank)."""
    con.print()
    cols = [Column("rank"), Column("steps", drop=3), Column("step time", short="step"), Column("compute", drop=2),
            Column("comm"), Column("exposed", short="expo"), Column("ops/step", drop=1, short="ops")]
    several = several_worlds(med.index)
    rows = [[rank_name(r, several), fmt_int(x["steps"]), fmt_ns(x["step_ns"]), fmt_ns(x["compute_ns"]),
             fmt_ns(x["comm_ns"]), fmt_ns(x["exposed_ns"]), fmt_count(x["ops"])] for r, x in med.iterrows()]
    print_table(con, cols, rows, title="Per rank (median over its steps)")
