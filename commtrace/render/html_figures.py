"""Plotly figures (plain figure dicts, drawn by the inlined plotly.js) of one report.

Nothing is computed here that the analysis does not give: the figures plot the
report's frame, spans, marks, step table, matched collectives, skew, and
``analysis.figures``. Every trace string goes through ``html_escape.text`` before
it reaches a plotly label (plotly parses labels as a subset of HTML); strings the
page shows itself (op fields on hover) travel as JSON and are set as DOM text.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.figures import STEP_PARTS, arrival_offsets, bandwidth_by_size, slowest_steps, step_breakdown
from ..analysis.timeline import bin_timeline
from .fmt import fmt_bytes, fmt_int
from .html_escape import text

TIMELINE_MAX_OPS = 20_000     # more ops in the window: the timeline is aggregated into bins
TIMELINE_BINS = 2_000         # bins per rank of an aggregated timeline (at most TIMELINE_MAX_CELLS / ranks)
TIMELINE_MAX_CELLS = 40_000   # bins over all ranks of an aggregated timeline
TIMELINE_MAX_SPANS = 20_000   # more compute spans: they are not drawn
TIMELINE_MAX_MARKS = 1_000
STEP_MAX_BARS = 1_200         # (rank, step) bars in the per-step chart; beyond, the slowest steps
SKEW_MAX_COLLECTIVES = 2_000  # columns of the arrival heatmap

OP_COLORS = {
    "all_reduce": "#2ca02c", "broadcast": "#1f77b4", "all_gather": "#17becf", "reduce_scatter": "#9467bd",
    "all_to_all": "#bcbd22", "barrier": "#d62728", "reduce": "#98df8a", "gather": "#9edae5",
    "scatter": "#c5b0d5", "send": "#ff7f0e", "recv": "#8c564b",
}
_EXTRA_COLORS = ["#7f7f7f", "#e377c2", "#393b79", "#ad494a", "#637939"]
PHASE_COLORS = {"forward": "#c7c7c7", "backward": "#a0a0a0", "optimizer": "#6b6b6b"}
PART_STYLE = {"compute_only_ns": ("compute (no comm)", "#9e9e9e"), "hidden_ns": ("hidden comm", "#66bb6a"),
              "exposed_ns": ("exposed comm", "#e53935"), "other_ns": ("other", "#e0e0e0")}
# Op fields shown on hover, in this order (those the frame has).
OP_FIELDS = ["rank", "op", "variant", "shapes", "out_shapes", "dtype", "bytes", "out_bytes", "group", "group_desc",
             "group_size", "seq", "phase", "iteration", "bucket", "params", "detail", "module", "api", "region",
             "callsite", "reduce_op", "root", "tag", "async", "device", "thread", "status", "error", "host", "backend"]


def op_color(op: str, i: int = 0) -> str:
    return OP_COLORS.get(op, _EXTRA_COLORS[i % len(_EXTRA_COLORS)])


def _lane(rank) -> str:
    return f"rank {int(rank)}"


def _ms(ns) -> np.ndarray:
    """ns -> ms, rounded to the ns (shorter JSON)."""
    return np.round(np.asarray(ns, dtype=np.float64) / 1e6, 6)


def _column(col: pd.Series, fmt=None) -> dict:
    """A field for the page's hover panel, compactly: integers as {"n": [...]}, anything
    else dictionary-encoded as {"v": distinct display strings, "c": codes (-1: missing)}.
    The strings reach the page as JSON and are set as DOM text (never parsed as HTML)."""
    if fmt is None and pd.api.types.is_integer_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
        vals = col.astype("Float64").to_numpy(np.float64, na_value=np.nan)
        return {"n": [None if v != v else int(v) for v in vals.tolist()]}
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    return {"v": [fmt(u) if fmt else str(u) for u in list(uniq)], "c": codes.tolist()}


def _layout(title: str, **kw) -> dict:
    base = {"title": {"text": text(title)}, "margin": {"l": 90, "r": 20, "t": 40, "b": 40},
            "hovermode": "closest", "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff"}
    base.update(kw)
    return base


# -- timeline ----------------------------------------------------------------------

def timeline_figure(rep) -> dict:
    """{"data", "layout", "ops": op fields per drawn op, "spans": span fields, "aggregated", "notes"}.

    Lanes: per rank "rank N" (ops, coloured by kind) with "rank N compute" beneath
    (forward/backward/optimizer spans), then a "marks" lane. Up to TIMELINE_MAX_OPS
    ops every op is one bar; beyond, per rank TIMELINE_BINS bins, each drawn in the
    colour of the op that fills most of it (analysis.timeline.bin_timeline)."""
    frame, t0 = rep.frame, int(rep.info["t0_ns"] or 0)
    ranks = sorted(int(r) for r in rep.info.get("rank_list") or np.unique(frame["rank"].to_numpy()).tolist())
    spans = rep.spans if rep.spans is not None else pd.DataFrame()
    draw_spans = 0 < len(spans) <= TIMELINE_MAX_SPANS
    lanes = []
    for r in ranks:
        lanes.append(_lane(r))
        if draw_spans:
            lanes.append(_lane(r) + " compute")
    notes = []
    data: list[dict] = []
    out: dict = {"ops": None, "spans": None, "aggregated": False}
    if len(frame) <= TIMELINE_MAX_OPS:
        data += _op_traces(frame, t0, rep.matched.inst, out)
    else:
        data += _binned_traces(rep, t0)
        out["aggregated"] = True
        notes.append(f"{fmt_int(len(frame))} ops are more than {fmt_int(TIMELINE_MAX_OPS)}: each rank's lane is "
                     f"cut into {fmt_int(timeline_bins(len(ranks)))} bins, each drawn in the colour of the op that "
                     "fills most of it (faint: ops fill less than half the bin). Every op: commtrace report "
                     "--perfetto FILE, then ui.perfetto.dev, or a narrower window (--steps, --from/--to).")
    if draw_spans:
        data += _span_traces(spans, t0, out)
    elif len(spans):
        notes.append(f"{fmt_int(len(spans))} compute spans are more than {fmt_int(TIMELINE_MAX_SPANS)}: not drawn "
                     "(--perfetto shows them, or choose a narrower window).")
    marks = rep.marks if rep.marks is not None else pd.DataFrame()
    if len(marks):
        m = marks.sort_values("t_ns", kind="stable").head(TIMELINE_MAX_MARKS)
        lanes.append("marks")
        data.append({"type": "scatter", "mode": "markers", "name": "marks", "meta": "marks",
                     "x": _ms(m["t_ns"].to_numpy(np.int64) - t0).tolist(), "y": ["marks"] * len(m),
                     "marker": {"symbol": "triangle-down", "size": 10, "color": "#000000"},
                     "hovertext": [f"rank {int(r)}: {text(lbl)}" for r, lbl in zip(m["rank"], m["label"])],
                     "hoverinfo": "text+x"})
        if len(marks) > TIMELINE_MAX_MARKS:
            notes.append(f"the first {fmt_int(TIMELINE_MAX_MARKS)} of {fmt_int(len(marks))} marks are drawn")
    # The cross-rank link of the op under the pointer (filled in by the page's script).
    data.append({"type": "scatter", "mode": "lines+markers", "name": "same collective", "meta": "link",
                 "x": [], "y": [], "line": {"color": "#000000", "width": 2, "dash": "dot"},
                 "marker": {"size": 7, "color": "#000000"}, "hoverinfo": "skip", "showlegend": False})
    height = max(260, 40 + 26 * len(lanes))
    out["layout"] = _layout("Timeline (ms after the first op; drag to zoom, double-click to reset)",
                            barmode="overlay", height=height,
                            xaxis={"zeroline": False},
                            yaxis={"type": "category", "categoryorder": "array", "categoryarray": lanes[::-1],
                                   "autorange": True, "fixedrange": True},
                            legend={"orientation": "h", "y": -0.15 if height < 400 else -0.06})
    out["data"] = data
    out["notes"] = notes
    out["lanes"] = [_lane(r) for r in ranks]
    return out


def _op_traces(frame: pd.DataFrame, t0: int, inst: np.ndarray, out: dict) -> list[dict]:
    n = len(frame)
    start = frame["t_start_ns"].to_numpy(np.int64) - t0 if n else np.empty(0, np.int64)
    end = frame["t_end_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan) - t0 if n else np.empty(0)
    dur = np.where(np.isfinite(end), end - start, 0.0)
    fields = {c: _column(frame[c], fmt_bytes if c == "bytes" else None) for c in OP_FIELDS if c in frame}
    fields["start (ms)"] = {"n": _ms(start).tolist()}
    fields["duration (ms)"] = {"n": [None if e != e else v for v, e in zip(_ms(dur).tolist(), end.tolist())]}
    lanes = np.array([_lane(r) for r in frame["rank"].tolist()], dtype=object) if n else np.empty(0, object)
    out["ops"] = {"fields": fields, "inst": np.asarray(inst, dtype=np.int64).tolist(),
                  "mid_ms": _ms(start + dur / 2).tolist(), "lane": _column(pd.Series(lanes, dtype=object))}
    traces = []
    ops = frame["op"].astype(str).to_numpy() if n else np.empty(0, object)
    for i, op in enumerate(sorted(set(ops.tolist()))):
        idx = np.flatnonzero(ops == op)
        traces.append({"type": "bar", "orientation": "h", "name": text(op), "meta": "ops",
                       "base": _ms(start[idx]).tolist(), "x": _ms(np.maximum(dur[idx], 1.0)).tolist(),
                       "y": lanes[idx].tolist(), "customdata": idx.tolist(),
                       "width": 0.8, "marker": {"color": op_color(op, i), "line": {"width": 0}},
                       "hoverinfo": "none"})
    return traces


def _span_traces(spans: pd.DataFrame, t0: int, out: dict) -> list[dict]:
    b = spans["t_begin_ns"].to_numpy(np.int64) - t0
    e = spans["t_end_ns"].to_numpy(np.int64) - t0
    fields = {c: _column(spans[c]) for c in ("rank", "phase", "step", "iteration", "module") if c in spans}
    fields["start (ms)"] = {"n": _ms(b).tolist()}
    fields["duration (ms)"] = {"n": _ms(e - b).tolist()}
    out["spans"] = {"fields": fields}
    phases = spans["phase"].astype(str).to_numpy()
    lanes = np.array([_lane(r) + " compute" for r in spans["rank"].tolist()], dtype=object)
    traces = []
    for ph in sorted(set(phases.tolist())):
        idx = np.flatnonzero(phases == ph)
        traces.append({"type": "bar", "orientation": "h", "name": text(ph), "meta": "spans",
                       "base": _ms(b[idx]).tolist(), "x": _ms(np.maximum(e[idx] - b[idx], 1)).tolist(),
                       "y": lanes[idx].tolist(), "customdata": idx.tolist(), "width": 0.5,
                       "marker": {"color": PHASE_COLORS.get(ph, "#bdbdbd"), "line": {"width": 0}},
                       "hoverinfo": "none", "legendgroup": "compute"})
    return traces


def timeline_bins(ranks: int) -> int:
    return max(100, min(TIMELINE_BINS, TIMELINE_MAX_CELLS // max(ranks, 1)))


def _binned_traces(rep, t0: int) -> list[dict]:
    tl = bin_timeline(rep.frame, t0, timeline_bins(len(rep.info.get("rank_list") or [0])), None, None, rep.arrays)
    dt = (tl.t_to_ns - tl.t_from_ns) / tl.width
    per_op: dict[int, dict] = {}
    for li, rank in enumerate(tl.ranks):
        cells, fill = tl.cells[li], tl.fill[li]
        strong = fill >= 0.5
        key = np.where(cells < 0, -1, cells * 2 + strong)
        cuts = np.flatnonzero(np.diff(key)) + 1
        for a, b in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(key)])).tolist()):
            c = int(cells[a])
            if c < 0:
                continue
            t = per_op.setdefault(c, {"base": [], "x": [], "y": [], "opacity": [], "custom": []})
            t["base"].append((tl.t_from_ns + a * dt) / 1e6)
            t["x"].append((b - a) * dt / 1e6)
            t["y"].append(_lane(rank))
            t["opacity"].append(1.0 if strong[a] else 0.35)
            t["custom"].append([b - a, int(round(float(np.mean(np.minimum(fill[a:b], 1))) * 100))])
    traces = []
    for c, t in sorted(per_op.items()):
        op = tl.ops[c]
        traces.append({"type": "bar", "orientation": "h", "name": text(op), "meta": "bins", "base": t["base"],
                       "x": np.round(t["x"], 6).tolist(), "y": t["y"], "customdata": t["custom"], "width": 0.8,
                       "marker": {"color": op_color(op, c), "opacity": t["opacity"], "line": {"width": 0}},
                       "hovertemplate": "%{y}: mostly " + text(op)
                       + " (%{customdata[0]} bins, ops %{customdata[1]}% of the time)<extra></extra>"})
    return traces


# -- per step ------------------------------------------------------------------------

def steps_figure(rep) -> dict | None:
    """Stacked bars per (step, rank): compute without comm, hidden comm, exposed comm, other."""
    st = rep.steps
    if st is None or not len(st.per_rank):
        return None
    parts = step_breakdown(st.per_rank)
    nranks = max(int(parts["rank"].nunique()), 1)
    keep = slowest_steps(st.across, max(STEP_MAX_BARS // nranks, 1))
    parts = parts[parts["step"].isin(keep)].sort_values(["step", "rank"], kind="stable")
    x = [[f"step {int(s)}" for s in parts["step"]], [f"r{int(r)}" for r in parts["rank"]]]
    data = [{"type": "bar", "name": PART_STYLE[p][0], "x": x, "y": _ms(parts[p]).tolist(),
             "marker": {"color": PART_STYLE[p][1]}, "hovertemplate": "%{x}: %{y:.3f} ms<extra>"
             + PART_STYLE[p][0] + "</extra>"} for p in STEP_PARTS]
    note = "" if len(keep) == len(st.across) else (
        f"the {len(keep)} slowest of {len(st.across)} steps (at most {STEP_MAX_BARS} bars)")
    return {"data": data, "note": note,
            "layout": _layout("Per step and rank: where the step time went (ms)", barmode="stack", height=380,
                              yaxis={"title": {"text": "ms"}}, xaxis={"type": "multicategory"})}


# -- skew ----------------------------------------------------------------------------

def skew_heatmap(rep) -> dict | None:
    off = arrival_offsets(rep.frame, rep.matched, SKEW_MAX_COLLECTIVES)
    if not off["collectives"]:
        return None
    t0 = int(rep.info["t0_ns"] or 0)
    x = _ms(off["first_start_ns"] - t0).tolist()
    data = [{"type": "heatmap", "z": np.round(_ms(off["offset_ns"]), 4).tolist(), "x": list(range(len(x))),
             "y": [_lane(r) for r in off["ranks"]], "colorscale": "Reds", "colorbar": {"title": {"text": "ms late"}},
             "hovertemplate": "%{y}, collective #%{x}: %{z:.3f} ms after the first caller<extra></extra>",
             "hoverongaps": False}]
    shown = len(x)
    total = off["collectives"]
    note = "" if shown == total else f"the first {fmt_int(shown)} of {fmt_int(total)} collectives"
    return {"data": data, "note": note,
            "layout": _layout("Arrival skew: how late each rank called each collective",
                              height=max(220, 60 + 22 * len(off["ranks"])),
                              xaxis={"title": {"text": "collective (time order)"}},
                              yaxis={"type": "category", "autorange": "reversed"})}


def stragglers_figure(rep) -> dict | None:
    st = rep.skew["stragglers"]
    if not len(st):
        return None
    data = [{"type": "bar", "orientation": "h", "x": _ms(st["wait_ns"]).tolist(), "y": [_lane(r) for r in st.index],
             "customdata": [[fmt_int(n), f"{s * 100:.1f}%"] for n, s in zip(st["last"], st["share_last"])],
             "hovertemplate": "%{y}: the others waited %{x:.3f} ms; last in %{customdata[0]} collectives "
                              "(%{customdata[1]})<extra></extra>", "marker": {"color": "#e53935"}}]
    layout = _layout("Stragglers: time the other ranks waited for the last caller (ms)",
                     height=max(200, 60 + 24 * len(st)), yaxis={"type": "category", "autorange": "reversed"})
    return {"data": data, "note": "", "layout": layout}


# -- bandwidth -----------------------------------------------------------------------

def bandwidth_figure(rep) -> dict | None:
    bw = bandwidth_by_size(rep.matched)
    if not len(bw):
        return None
    data = []
    for i, (op, g) in enumerate(bw.groupby("op", sort=True)):
        color = op_color(op, i)
        sizes = g["size_bytes"].tolist()
        common = {"x": sizes, "customdata": [[fmt_bytes(s), fmt_int(n)] for s, n in zip(sizes, g["collectives"])],
                  "legendgroup": text(op)}
        data.append({"type": "scatter", "mode": "lines+markers", "name": text(op) + " busbw",
                     "y": (g["busbw"] / 1e9).tolist(), "line": {"color": color}, **common,
                     "hovertemplate": text(op) + " %{customdata[0]} (%{customdata[1]} collectives): busbw "
                                                 "%{y:.3f} GB/s<extra></extra>"})
        data.append({"type": "scatter", "mode": "lines+markers", "name": text(op) + " algbw",
                     "y": (g["algbw"] / 1e9).tolist(), "line": {"color": color, "dash": "dot"}, **common,
                     "hovertemplate": text(op) + " %{customdata[0]} (%{customdata[1]} collectives): algbw "
                                                 "%{y:.3f} GB/s<extra></extra>"})
    return {"data": data, "note": "",
            "layout": _layout("Bandwidth against message size (nccl-tests algbw / busbw, GB/s)", height=380,
                              xaxis={"type": "log", "title": {"text": "message size (bytes)"}},
                              yaxis={"title": {"text": "GB/s"}})}


# -- compare -------------------------------------------------------------------------

def compare_figure(named: list) -> dict | None:
    """Per run, box plots of its steps' step time and exposed communication (the
    step table's figures across ranks, one value per step)."""
    data = []
    for col, label, color in (("step_ns", "step time", "#1f77b4"), ("exposed_ns", "exposed comm", "#e53935")):
        xs, ys = [], []
        for name, rep in named:
            if rep.steps is None or not len(rep.steps.across):
                continue
            v = _ms(rep.steps.across[col]).tolist()
            ys += v
            xs += [text(name)] * len(v)
        if ys:
            data.append({"type": "box", "name": label, "x": xs, "y": ys, "marker": {"color": color},
                         "boxpoints": "all", "jitter": 0.3, "pointpos": 0})
    if not data:
        return None
    return {"data": data, "note": "",
            "layout": _layout("Per run: step time and exposed communication per step (ms)", boxmode="group",
                              height=420, yaxis={"title": {"text": "ms"}})}
