"""``commtrace compare`` in the terminal: per-step figures, then the per-op breakdown."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from .fmt import fmt_bw, fmt_bytes, fmt_count, fmt_delta, fmt_int, fmt_ns, plain_safe
from .tables import Column, print_table
from ..trace.rank_ranges import rank_name, several_worlds

STEP_ROWS = [("step time", "step_ns", fmt_ns), ("compute", "compute_ns", fmt_ns), ("comm", "comm_ns", fmt_ns),
             ("exposed", "exposed_ns", fmt_ns), ("ops/step", "ops", fmt_count), ("bytes/step", "bytes", fmt_bytes)]
BREAKDOWN = [("colls", "collectives", fmt_int, 0), ("ops", "ops", fmt_int, 6), ("bytes", "bytes", fmt_bytes, 3),
             ("mean", "mean_ns", fmt_ns, 0), ("p50", "p50_ns", fmt_ns, 4), ("p99", "p99_ns", fmt_ns, 5),
             ("busbw", "busbw", fmt_bw, 2)]
# Lower is better for these (a negative delta is green).
_TIME_STATS = {"step_ns", "compute_ns", "comm_ns", "exposed_ns", "mean_ns", "p50_ns", "p99_ns"}


def _delta_text(d: float, band: float | None = None, within: bool = False) -> str:
    if d != d:
        return "-"
    txt = fmt_delta(d) + (f" ±{band:.1f}%" if band is not None and band == band else "")
    return f"({txt})" if within else txt


def _delta_style(stat: str, d: float, within: bool) -> str | None:
    if d != d or within or abs(d) < 1 or stat not in _TIME_STATS:
        return None
    return "green" if d < 0 else "red"


def render_compare(con: Console, cmp: dict) -> None:
    runs = cmp["runs"]
    labels = ["BASE"] + [f"EXP{i}" for i in range(1, len(runs))]
    con.print(Text("commtrace compare", style="bold"))
    for label, name, w in zip(labels, runs, cmp["windows"]):
        steps = f"{w['steps_shown']} of {w['steps_total']} steps" if w["steps_total"] else "no optimizer steps"
        cover = f"; bounded trace: {plain_safe(w['coverage'])}" if w.get("coverage") else ""
        con.print(Text(f"  {label:<5} {plain_safe(name)}  ({steps}; window: {plain_safe(w['window'])}{cover})"),
                  overflow="fold")
    _render_steps(con, cmp, labels)
    _render_breakdown(con, cmp, labels)


def _render_steps(con: Console, cmp: dict, labels: list[str]) -> None:
    st = cmp["steps"]
    runs = cmp["runs"]
    con.print()
    if not any(w["steps_shown"] for w in cmp["windows"]):
        con.print(Text("Per step: no run has optimizer steps in its window (the breakdown below still applies).",
                       style="dim"), overflow="fold")
        return
    columns = [Column("per step", right=False)] + [Column(lbl, drop=0 if i < 2 else 10 - i)
                                                   for i, lbl in enumerate(labels)]
    rows, styles = [], []
    for name, stat, fmt in STEP_ROWS:
        vals, spread, style_s = [name], [""], [None]
        for i, run in enumerate(runs):
            r = st.loc[(run, stat)]
            vals.append(fmt(r["median"]))
            if i == 0:
                spread.append("±" + fmt(r["spread"]) if r["n"] else "-")
                style_s.append("dim")
            else:
                within = bool(r["within_noise"])
                spread.append(_delta_text(r["delta_pct"], r["band_pct"], within))
                style_s.append(_delta_style(stat, r["delta_pct"], within))
        rows += [vals, spread]
        styles += [[None] * len(vals), style_s]
    bus = [fmt_bw(b) for b in cmp["busbw"]]
    rows.append(["busbw"] + bus)
    styles.append([None] * len(rows[-1]))
    print_table(con, columns, rows, styles=styles,
                title="Per step (median over the steps shown, across ranks as in the report's step table)",
                note="under BASE: ± spread (half the interquartile range over steps); under EXPn: change vs BASE "
                     "± noise band; (in parentheses): within the noise band. busbw: all collectives in the window.")


def _render_breakdown(con: Console, cmp: dict, labels: list[str]) -> None:
    table, runs, by = cmp["breakdown"], cmp["runs"], cmp["by"]
    con.print()
    columns = [Column(b, right=False, text=b not in ("op",), drop=0) for b in by] + [Column("run", right=False)] + \
              [Column(h, drop=d) for h, _, _, d in BREAKDOWN]
    rows, styles = [], []
    shown = _shown_keys(cmp)
    for key, row in table.iterrows():
        kt = shown(key)
        for i, (run, label) in enumerate(zip(runs, labels)):
            rows.append([plain_safe(k) if i == 0 else "" for k in kt] + [label]
                        + [fmt(row[(run, stat)]) for _, stat, fmt, _ in BREAKDOWN])
            styles.append([None] * len(rows[-1]))
            if i:   # its changes against BASE, under it
                deltas = [(stat, row[(run, stat + "_delta")]) for _, stat, _, _ in BREAKDOWN]
                rows.append([""] * (len(kt) + 1) + [_delta_text(d) for _, d in deltas])
                styles.append([None] * (len(kt) + 1) + [_delta_style(stat, d, False) for stat, d in deltas])
    if not rows:
        con.print(Text("No communication in the windows compared.", style="bold"))
        return
    print_table(con, columns, rows, styles=styles, title="Per " + ", ".join(by) + " (change vs BASE under each EXP)",
                note="colls: collectives; ops and bytes: all ranks; mean/p50/p99: per-op durations; busbw: "
                     "nccl-tests convention. Same definitions as `commtrace report`.")


def _shown_keys(cmp: dict):
    """A breakdown row's key as a tuple, rank keys named as the report names them ("w1:r0" in runs
    of several worlds)."""
    by = cmp["by"]
    at = by.index("rank") if "rank" in by else None
    several = at is not None and several_worlds(cmp["breakdown"].index.get_level_values(at))

    def shown(key) -> tuple:
        kt = key if isinstance(key, tuple) else (key,)
        return kt if at is None else (*kt[:at], rank_name(kt[at], several), *kt[at + 1:])
    return shown


def compare_json(cmp: dict) -> dict:
    """The comparison as JSON (format commtrace-compare, version 2; docs/report.md)."""
    from ..analysis.report import json_safe
    st = cmp["steps"]
    steps = {run: {stat: {k: json_safe(v) for k, v in st.loc[(run, stat)].items()} for stat in
                   st.loc[run].index} for run in cmp["runs"]}
    rows, shown = [], _shown_keys(cmp)
    for key, row in cmp["breakdown"].iterrows():
        item = {b: str(k) for b, k in zip(cmp["by"], shown(key))}
        for name in cmp["runs"]:
            item[name] = {stat: json_safe(row[(n, stat)]) for (n, stat) in cmp["breakdown"].columns if n == name}
        rows.append(item)
    return {"format": "commtrace-compare", "version": 2, "base": cmp["runs"][0], "runs": cmp["runs"],
            "windows": json_safe(cmp["windows"]), "busbw": json_safe(cmp["busbw"]), "steps": steps,
            "by": cmp["by"], "rows": rows}
