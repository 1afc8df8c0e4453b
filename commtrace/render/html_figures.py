"""Plotly figures (plain figure dicts, drawn by the inlined plotly.js) of one report.

The figures plot what the analysis gives (frame, spans, marks, step table, matched collectives, skew,
``analysis.figures``), computing nothing. Trace strings go through ``html_escape.text`` before a
plotly label (plotly parses labels as HTML); hover fields travel as JSON and are set as DOM text.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import intervals as iv
from ..analysis.arrays import equal_runs
from ..analysis.figures import (STEP_PARTS, arrival_offsets, bandwidth_by_size, binned_majority, exposure_intervals,
                                slowest_steps, step_breakdown, steps_across_ranks)
from ..analysis.timeline import bin_timeline
from ..trace.rank_ranges import WORLD_STRIDE, rank_key, rank_name, several_worlds
from ..trace.schema import op_kind
from .fmt import fmt_bw, fmt_bytes, fmt_int, fmt_ns
from .html_escape import text

TIMELINE_MAX_OPS = 20_000     # more ops in the window: the timeline is aggregated into bins
TIMELINE_BINS = 2_000         # bins per rank of an aggregated timeline (at most TIMELINE_MAX_CELLS / ranks)
TIMELINE_MAX_CELLS = 40_000   # bins over all ranks of an aggregated timeline
TIMELINE_MAX_SPANS = 20_000   # more compute spans: they are binned like an aggregated timeline's ops
TIMELINE_MAX_STRIPS = 10_000  # more exposed / hidden intervals: the exposure strip is binned likewise
TIMELINE_MAX_MARKS = 1_000
STEP_MAX_BARS = 1_200         # (rank, step) bars in the per-step chart; beyond, the slowest steps
STEP_MAX_RANK_BARS = 4        # more ranks: one bar per step (mean over the ranks) with the min-max step time
STEP_MAX_RANK_STEP_BARS = 80  # more (step, rank) bars than this: the same (their labels would not fit)
STEP_MAX_MEAN_STEPS = 300     # steps in the mean form; beyond, the slowest steps
STEP_MAX_LABELS = 40          # step numbers written on the timeline; beyond, every k-th
STEP_MAX_LINES = 200          # step lines drawn on the timeline; beyond, every k-th (each is an SVG shape)
SKEW_MAX_COLLECTIVES = 2_000  # columns of the arrival heatmap

_EXTRA_COLORS = ["#7f7f7f", "#e377c2", "#393b79", "#ad494a", "#637939"]   # ops without one in schema.OP_KINDS
# Compute phases: hues no op kind uses, so a lane's ops and its compute never look alike.
PHASE_COLORS = {"forward": "#90caf9", "backward": "#ffcc80", "optimizer": "#ce93d8"}
EXPOSED_COLOR, HIDDEN_COLOR = "#e53935", "#66bb6a"   # as the per-step chart's exposed / hidden comm
PART_STYLE = {"compute_only_ns": ("compute (no comm)", "#9e9e9e"), "hidden_ns": ("hidden comm", "#66bb6a"),
              "exposed_ns": ("exposed comm", "#e53935"), "other_ns": ("other", "#e0e0e0")}
# Op fields shown on hover, in this order (those the frame has).
OP_FIELDS = ["rank", "op", "variant", "shapes", "out_shapes", "dtype", "bytes", "out_bytes", "group", "group_desc",
             "group_size", "seq", "phase", "iteration", "bucket", "params", "detail", "module", "api", "region",
             "callsite", "reduce_op", "root", "tag", "async", "device", "thread", "status", "error", "host", "backend"]


def op_color(op: str, i: int = 0) -> str:
    return op_kind(op).html or _EXTRA_COLORS[i % len(_EXTRA_COLORS)]


def _lane(rank, several: bool) -> str:
    """A rank's lane ("rank w1:r0" when the run has ``several`` worlds: rank_ranges.rank_name)."""
    return f"rank {rank_name(rank, several)}"


def _ms(ns, digits: int = 6) -> np.ndarray:
    """ns -> ms, rounded to the ns (``digits`` 4: to 100 ns, shorter JSON for drawn positions)."""
    return np.round(np.asarray(ns, dtype=np.float64) / 1e6, digits)


def _column(col: pd.Series, fmt=None) -> dict | None:
    """A hover panel field, compactly: None (no value anywhere), {"k": one value for all}, {"n":
    integers}, else {"v": distinct display strings, "c": codes (-1: missing)}; set as DOM text."""
    if not len(col) or col.isna().all():
        return None
    if not col.isna().any() and col.nunique(dropna=False) == 1:
        v = col.iloc[0]
        return {"k": fmt(v) if fmt else v.item() if hasattr(v, "item") else str(v)}
    if fmt is None and pd.api.types.is_integer_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
        vals = col.astype("Float64").to_numpy(np.float64, na_value=np.nan)
        return {"n": [None if v != v else int(v) for v in vals.tolist()]}
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    return {"v": [fmt(u) if fmt else str(u) for u in list(uniq)], "c": codes.tolist()}


def _fields(frame: pd.DataFrame, names, several: bool, start, length, fmts: dict | None = None) -> dict:
    """The hover panel's fields of ``frame`` that have a value somewhere (its rank "w1:r0" when the run
    has ``several`` worlds), then each row's start and duration (ns after t0; NaN: unknown) in ms."""
    out = {c: _column(frame[c], (fmts or {}).get(c)) for c in names if c in frame}
    out = {c: f for c, f in out.items() if f is not None}
    if several and len(frame):
        out["rank"] = _column(pd.Series([rank_name(r, True) for r in frame["rank"].tolist()], dtype=object))
    out["start (ms)"] = {"n": _ms(start, 4).tolist()}
    out["duration (ms)"] = {"n": [None if v != v else v for v in _ms(length, 4).tolist()]}
    return out


def _world_steps(per_rank: pd.DataFrame, several: bool) -> pd.DataFrame:
    """The per-rank step rows, each step keyed by its world (rank_ranges.rank_key of world and step) when
    the run has ``several``: a step is a step of a world, each world has a step 1."""
    if not several:
        return per_rank
    world = per_rank["rank"].to_numpy(np.int64) // WORLD_STRIDE
    return per_rank.assign(step=world * WORLD_STRIDE + per_rank["step"].to_numpy(np.int64))


def _step_text(step, several: bool) -> str:
    """A step (``_world_steps``) as shown: "3", or "w1:3" (step 3 of world 1)."""
    step = int(step)
    return f"w{step // WORLD_STRIDE}:{step % WORLD_STRIDE}" if several else str(step)


def _layout(title: str, **kw) -> dict:
    return {"title": {"text": text(title)}, "margin": {"l": 90, "r": 20, "t": 40, "b": 40},
            "hovermode": "closest", "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff", **kw}


# -- timeline ----------------------------------------------------------------------

def timeline_figure(rep, steady_step: int | None = None) -> dict:
    """{"data", "layout", "ops" (fields per drawn op), "spans", "aggregated", "notes", "lanes"}.

    Per rank a lane of ops (by kind) over a strip of its exposed (red) / hidden (green) comm, and
    a compute lane; then marks; dotted lines where steps begin. Beyond TIMELINE_MAX_OPS ops, per rank
    TIMELINE_BINS bins in the colour of the op filling most of each. ``steady_step``: the x axis
    opens there ("steady" in the layout's meta)."""
    ops = rep.op_view
    frame, t0 = ops.frame, int(rep.info["t0_ns"] or 0)
    ranks = sorted(int(r) for r in rep.info.get("rank_list") or np.unique(frame["rank"].to_numpy()).tolist())
    sev = several_worlds(ranks)
    spans = ops.spans if ops.spans is not None else pd.DataFrame()
    draw_spans = 0 < len(spans) <= TIMELINE_MAX_SPANS
    lanes = []
    for r in ranks:
        lanes.append(_lane(r, sev))
        if len(spans):
            lanes.append(_lane(r, sev) + " compute")
    notes = []
    data: list[dict] = []
    out: dict = {"ops": None, "spans": None, "aggregated": False}
    binned = None
    bins = timeline_bins(len(ranks))
    if len(frame) <= TIMELINE_MAX_OPS:
        data += _op_traces(frame, t0, ops.matched.inst, out, sev)
    else:
        binned = bin_timeline(frame, t0, bins, arrays=ops.arrays)
        data += _binned_traces(binned, sev)
        out["aggregated"] = True
        notes.append(f"{fmt_int(len(frame))} ops are more than {fmt_int(TIMELINE_MAX_OPS)}: each rank's lane is "
                     f"cut into {fmt_int(bins)} bins, each drawn in the colour of the op that "
                     "fills most of it (faint: ops fill less than half the bin). Every op: commtrace report "
                     "--perfetto FILE, then ui.perfetto.dev, or a narrower window (--steps, --from/--to).")
    data += _exposure_traces(ops, t0, sev, binned, notes)
    if draw_spans and binned is None:
        data += _span_traces(spans, t0, out, sev)
    elif len(spans):
        data += _binned_span_traces(spans, binned or bin_timeline(frame, t0, bins, arrays=ops.arrays), sev)
        many = "" if draw_spans else " are more than " + fmt_int(TIMELINE_MAX_SPANS)
        notes.append(f"{fmt_int(len(spans))} compute spans{many}: "
                     "binned like the ops, each bin in the colour of the phase that fills most of it (hover: "
                     "the phase; --perfetto shows every span).")
    marks = ops.marks if ops.marks is not None else pd.DataFrame()
    if len(marks):
        m = marks.sort_values("t_ns", kind="stable").head(TIMELINE_MAX_MARKS)
        lanes.append("marks")
        data.append({"type": "scatter", "mode": "markers", "name": "marks", "meta": "marks",
                     "x": _ms(m["t_ns"].to_numpy(np.int64) - t0).tolist(), "y": ["marks"] * len(m),
                     "marker": {"symbol": "triangle-down", "size": 10, "color": "#000000"},
                     "hovertext": [f"{_lane(r, sev)}: {text(lbl)}" for r, lbl in zip(m["rank"], m["label"])],
                     "hoverinfo": "text+x"})
        if len(marks) > TIMELINE_MAX_MARKS:
            notes.append(f"the first {fmt_int(TIMELINE_MAX_MARKS)} of {fmt_int(len(marks))} marks are drawn")
    # The cross-rank link of the op under the pointer (filled in by the page's script).
    data.append({"type": "scatter", "mode": "lines+markers", "name": "same collective", "meta": "link",
                 "x": [], "y": [], "line": {"color": "#000000", "width": 2, "dash": "dot"},
                 "marker": {"size": 7, "color": "#000000"}, "hoverinfo": "skip", "showlegend": False})
    height = max(260, 70 + 26 * len(lanes))
    shapes, labels, steady = _step_marks(rep, t0, steady_step)
    xaxis = {"zeroline": False}
    if steady is not None:
        xaxis.update(range=steady, autorange=False)
    out["layout"] = _layout("Timeline (ms after the first op; drag to zoom, double-click to reset)",
                            barmode="overlay", height=height, shapes=shapes, annotations=labels,
                            meta={"steady": steady}, margin={"l": 90, "r": 20, "t": 60, "b": 40},
                            xaxis=xaxis,
                            yaxis={"type": "category", "categoryorder": "array", "categoryarray": lanes[::-1],
                                   "autorange": True, "fixedrange": True},
                            legend={"orientation": "h", "y": -0.15 if height < 400 else -0.06})
    out.update(data=data, notes=notes, lanes=[_lane(r, sev) for r in ranks])
    return out


def _step_marks(rep, t0: int, steady_step: int | None) -> tuple[list, list, list | None]:
    """Dotted lines where each step begins (its earliest rank), labelled with its
    number, and the x range [steady step's begin, last step's end] (ms) or None."""
    st = rep.steps
    if st is None or not len(st.per_rank):
        return [], [], None
    sev = several_worlds(rep.info["rank_list"])
    pr = _world_steps(st.per_rank, sev)
    g = pr.groupby("step", sort=True)
    begin = _ms(g["t_begin_ns"].min().to_numpy(np.int64) - t0)
    end = _ms(g["t_end_ns"].max().to_numpy(np.int64) - t0)
    steps = g["t_begin_ns"].min().index.to_numpy(np.int64)
    every_line = -(-len(steps) // STEP_MAX_LINES)
    every = every_line * -(-(-(-len(steps) // STEP_MAX_LABELS)) // every_line)   # a labelled step has its line
    shapes, labels = [], []
    for i, (s, b) in enumerate(zip(steps.tolist(), begin.tolist())):
        if i % every_line == 0:
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": b, "x1": b, "y0": 0, "y1": 1,
                           "line": {"color": "#757575", "width": 1, "dash": "dot"}, "layer": "below"})
        if i % every == 0:
            labels.append({"x": b, "y": 1, "xref": "x", "yref": "paper", "yanchor": "bottom", "xanchor": "left",
                           "text": f"step {_step_text(s, sev)}", "showarrow": False,
                           "font": {"size": 11, "color": "#424242"}})
    steady = None
    number = steps % WORLD_STRIDE if sev else steps
    if steady_step is not None and (number >= steady_step).any():
        lo, hi = float(begin[number >= steady_step].min()), float(end.max())
        pad = (hi - lo) * 0.01
        steady = [lo - pad, hi + pad]
    return shapes, labels, steady


def _exposure_traces(ops, t0: int, several: bool, binned, notes: list) -> list[dict]:
    """Per op lane, a strip under the ops: exposed communication (red) and hidden (green);
    ``binned`` (an aggregated timeline): per bin, whichever of the two fills more of it."""
    ex = exposure_intervals(ops.frame, ops.arrays, ops.spans, ops.bounds)
    if binned is None and len(ex) > TIMELINE_MAX_STRIPS:     # bars are what a browser pays for: bin them
        binned = bin_timeline(ops.frame, t0, timeline_bins(len(set(ex["rank"].tolist()))), arrays=ops.arrays)
        notes.append(f"{fmt_int(len(ex))} exposed / hidden intervals are more than {fmt_int(TIMELINE_MAX_STRIPS)}: "
                     "the strip along the ops is binned, each bin in the colour of the part that covers most of it.")
    if binned is not None:
        sets = {}
        for r, g in ex.groupby("rank", sort=True):
            sets[int(r)] = [iv.union(g.loc[g["exposed"] == k, "t_begin_ns"].to_numpy(np.int64) - t0,
                                     g.loc[g["exposed"] == k, "t_end_ns"].to_numpy(np.int64) - t0)
                            for k in (True, False)]
        styles = [("exposed comm", EXPOSED_COLOR), ("hidden comm", HIDDEN_COLOR)]
        return _majority_traces(binned, sets, styles, "exposure", 0.22, 0.16, several)
    traces = []
    for exposed, name, color in ((True, "exposed comm", EXPOSED_COLOR), (False, "hidden comm", HIDDEN_COLOR)):
        part = ex[ex["exposed"].to_numpy(bool) == exposed]
        if not len(part):
            continue
        b = part["t_begin_ns"].to_numpy(np.int64) - t0
        e = part["t_end_ns"].to_numpy(np.int64) - t0
        traces.append({"type": "bar", "orientation": "h", "name": name, "meta": "exposure",
                       "base": _ms(b, 4).tolist(), "x": _ms(np.maximum(e - b, 1), 4).tolist(),
                       "y": [_lane(r, several) for r in part["rank"].tolist()], "width": 0.22, "offset": 0.16,
                       "marker": {"color": color, "line": {"width": 0}},
                       "customdata": [fmt_ns(v) for v in (e - b).tolist()],
                       "hovertemplate": "%{y}: " + name + " %{customdata}<extra></extra>"})
    return traces


def _op_traces(frame: pd.DataFrame, t0: int, inst: np.ndarray, out: dict, several: bool) -> list[dict]:
    n = len(frame)
    start = frame["t_start_ns"].to_numpy(np.int64) - t0 if n else np.empty(0, np.int64)
    end = frame["t_end_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan) - t0 if n else np.empty(0)
    dur = np.where(np.isfinite(end), end - start, 0.0)
    fields = _fields(frame, OP_FIELDS, several, start, end - start, {"bytes": fmt_bytes, "out_bytes": fmt_bytes})
    lanes = np.array([_lane(r, several) for r in frame["rank"].tolist()], dtype=object) if n else np.empty(0, object)
    out["ops"] = {"fields": fields, "inst": np.asarray(inst, dtype=np.int64).tolist(),
                  "mid_ms": _ms(start + dur / 2, 4).tolist(), "lane": _column(pd.Series(lanes, dtype=object))}
    ops = frame["op"].astype(str).to_numpy() if n else np.empty(0, object)
    return _bars_by_kind(ops, start, dur, lanes, "ops", text, op_color, {"width": 0.55, "offset": -0.42})


def _span_traces(spans: pd.DataFrame, t0: int, out: dict, several: bool) -> list[dict]:
    b = spans["t_begin_ns"].to_numpy(np.int64) - t0
    e = spans["t_end_ns"].to_numpy(np.int64) - t0
    out["spans"] = {"fields": _fields(spans, ("rank", "phase", "step", "iteration", "module"), several, b, e - b)}
    phases = spans["phase"].astype(str).to_numpy()
    lanes = np.array([_lane(r, several) + " compute" for r in spans["rank"].tolist()], dtype=object)
    return _bars_by_kind(phases, b, e - b, lanes, "spans", lambda ph: text(ph) + " (compute)",
                         lambda ph, i: PHASE_COLORS.get(ph, "#bdbdbd"), {"width": 0.5}, {"legendgroup": "compute"})


def _bars_by_kind(kinds: np.ndarray, begin: np.ndarray, length: np.ndarray, lanes: np.ndarray, meta: str, name,
                  color, geometry: dict, extra: dict | None = None) -> list[dict]:
    """One bar trace per kind (op, phase), in name order: each row of that kind a bar on its lane, at least
    1 ns long (``name(kind)``, ``color(kind, i)``; ``geometry``: width, offset); hover is the page's script's."""
    traces = []
    for i, kind in enumerate(sorted(set(kinds.tolist()))):
        idx = np.flatnonzero(kinds == kind)
        traces.append({"type": "bar", "orientation": "h", "name": name(kind), "meta": meta,
                       "base": _ms(begin[idx], 4).tolist(), "x": _ms(np.maximum(length[idx], 1), 4).tolist(),
                       "y": lanes[idx].tolist(), "customdata": idx.tolist(), **geometry,
                       "marker": {"color": color(kind, i), "line": {"width": 0}}, "hoverinfo": "none",
                       **(extra or {})})
    return traces


def timeline_bins(ranks: int) -> int:
    return max(100, min(TIMELINE_BINS, TIMELINE_MAX_CELLS // max(ranks, 1)))


def _binned_span_traces(spans: pd.DataFrame, binned, several: bool) -> list[dict]:
    """Compute spans of an aggregated timeline: per bin, the phase that fills most of it."""
    t0 = binned.t0_ns
    phases = sorted(set(spans["phase"].astype(str).tolist()))
    sets = {}
    for r, g in spans.groupby("rank", sort=True):
        ph = g["phase"].astype(str).to_numpy()
        b, e = g["t_begin_ns"].to_numpy(np.int64) - t0, g["t_end_ns"].to_numpy(np.int64) - t0
        sets[int(r)] = [iv.union(b[ph == p], e[ph == p]) for p in phases]
    styles = [(text(p) + " (compute)", PHASE_COLORS.get(p, "#bdbdbd")) for p in phases]
    traces = _majority_traces(binned, sets, styles, "spanbins", 0.5, None, several, " compute")
    for t in traces:
        t["legendgroup"] = "compute"
    return traces


def _majority_traces(binned, sets: dict, styles: list, meta: str, width: float, offset, several: bool,
                     lane_suffix: str = "") -> list[dict]:
    """Bars over ``binned``'s bins: per rank, runs of bins where the same set (of
    ``sets[rank]``, drawn as ``styles[i]`` = (name, colour)) covers most."""
    lo, hi, n = binned.t_from_ns, binned.t_to_ns, binned.width
    dt = (hi - lo) / n
    runs: dict[int, dict] = {}
    for rank, rank_sets in sets.items():
        best, fill = binned_majority(rank_sets, lo, hi, n)
        for k, a, b in equal_runs(best):
            if k < 0:
                continue
            t = runs.setdefault(k, {"base": [], "x": [], "y": [], "custom": []})
            t["base"].append((lo + a * dt) / 1e6)
            t["x"].append((b - a) * dt / 1e6)
            t["y"].append(_lane(rank, several) + lane_suffix)
            t["custom"].append(int(round(float(np.mean(fill[a:b])) * 100)))
    traces = []
    for k, t in sorted(runs.items()):
        name, color = styles[k]
        tr = {"type": "bar", "orientation": "h", "name": name, "meta": meta, "base": np.round(t["base"], 4).tolist(),
              "x": np.round(t["x"], 4).tolist(), "y": t["y"], "customdata": t["custom"], "width": width,
              "marker": {"color": color, "line": {"width": 0}},
              "hovertemplate": "%{y}: mostly " + name + " (%{customdata}% of the time)<extra></extra>"}
        if offset is not None:
            tr["offset"] = offset
        traces.append(tr)
    return traces


def _binned_traces(tl, several: bool) -> list[dict]:
    dt = (tl.t_to_ns - tl.t_from_ns) / tl.width
    per_op: dict[int, dict] = {}
    for li, rank in enumerate(tl.ranks):
        cells, fill = tl.cells[li], tl.fill[li]
        strong = fill >= 0.5
        for k, a, b in equal_runs(np.where(cells < 0, -1, cells * 2 + strong)):
            if k < 0:
                continue
            c = k // 2
            t = per_op.setdefault(c, {"base": [], "x": [], "y": [], "opacity": [], "custom": []})
            t["base"].append((tl.t_from_ns + a * dt) / 1e6)
            t["x"].append((b - a) * dt / 1e6)
            t["y"].append(_lane(rank, several))
            t["opacity"].append(1.0 if strong[a] else 0.35)
            t["custom"].append([b - a, int(round(float(np.mean(np.minimum(fill[a:b], 1))) * 100))])
    traces = []
    for c, t in sorted(per_op.items()):
        op = tl.ops[c]
        traces.append({"type": "bar", "orientation": "h", "name": text(op), "meta": "bins", "base": t["base"],
                       "x": np.round(t["x"], 6).tolist(), "y": t["y"], "customdata": t["custom"], "width": 0.55,
                       "offset": -0.42,
                       "marker": {"color": op_color(op, c), "opacity": t["opacity"], "line": {"width": 0}},
                       "hovertemplate": "%{y}: mostly " + text(op)
                       + " (%{customdata[0]} bins, ops %{customdata[1]}% of the time)<extra></extra>"})
    return traces


# -- per step ------------------------------------------------------------------------

def steps_figure(rep) -> dict | None:
    """Stacked bars of compute without comm, hidden comm, exposed comm and other: per
    (step, rank) up to STEP_MAX_RANK_BARS ranks; beyond, per step the mean over the
    ranks, with the step time's min-max over the ranks as a whisker."""
    st = rep.steps
    if st is None or not len(st.per_rank):
        return None
    sev = several_worlds(rep.info["rank_list"])
    across = st.across
    if sev:
        across = across.set_axis([rank_key(int(w[1:]), int(s)) for w, s in zip(across["world"], across.index)])
    parts = step_breakdown(_world_steps(st.per_rank, sev))
    nranks = max(int(parts["rank"].nunique()), 1)
    yaxis = {"title": {"text": "ms"}, "rangemode": "tozero"}
    if nranks > STEP_MAX_RANK_BARS or nranks * len(across) > STEP_MAX_RANK_STEP_BARS:
        keep = slowest_steps(across, STEP_MAX_MEAN_STEPS)
        mean = steps_across_ranks(parts[parts["step"].isin(keep)])
        x = [_step_text(s, sev) if sev else int(s) for s in mean.index]
        data = [{"type": "bar", "name": PART_STYLE[p][0], "x": x, "y": _ms(mean[p]).tolist(),
                 "marker": {"color": PART_STYLE[p][1]}, "customdata": [fmt_ns(v) for v in mean[p].tolist()],
                 "hovertemplate": "step %{x}: %{customdata} (mean of the ranks)<extra>" + PART_STYLE[p][0]
                 + "</extra>"} for p in STEP_PARTS]
        tot = mean[list(STEP_PARTS)].sum(axis=1).to_numpy(np.float64)
        above = np.clip(mean["max_step_ns"].to_numpy(np.float64) - tot, 0, None)
        below = np.clip(tot - mean["min_step_ns"].to_numpy(np.float64), 0, None)
        data.append({"type": "scatter", "mode": "markers", "name": "step time min-max over ranks", "x": x,
                     "y": _ms(tot).tolist(), "marker": {"color": "#212121", "size": 3},
                     "error_y": {"type": "data", "symmetric": False, "color": "#212121", "thickness": 1, "width": 3,
                                 "array": _ms(above).tolist(), "arrayminus": _ms(below).tolist()},
                     "customdata": [[fmt_ns(a), fmt_ns(b)] for a, b in zip(mean["min_step_ns"], mean["max_step_ns"])],
                     "hovertemplate": "step %{x}: step time %{customdata[0]} .. %{customdata[1]} over "
                                      + f"{nranks} ranks<extra></extra>"})
        shown = "" if len(keep) == len(across) else f" (the {len(keep)} slowest of {len(across)} steps)"
        return {"data": data, "note": f"{nranks} rank{'s' if nranks > 1 else ''} x {len(mean)} steps{shown}: each "
                                      "bar is the mean over the ranks of each part; the whisker spans the fastest "
                                      "and the slowest rank's step time",
                "layout": _layout("Per step, mean over the ranks: where the step time went (ms)", barmode="stack",
                                  height=380, yaxis=yaxis, xaxis={"title": {"text": "step"}})}
    keep = slowest_steps(across, max(STEP_MAX_BARS // nranks, 1))
    parts = parts[parts["step"].isin(keep)].sort_values(["step", "rank"], kind="stable")
    x = [[f"step {_step_text(s, sev)}" for s in parts["step"]],
         [rank_name(r, sev) if sev else f"r{int(r)}" for r in parts["rank"]]]
    data = [{"type": "bar", "name": PART_STYLE[p][0], "x": x, "y": _ms(parts[p]).tolist(),
             "marker": {"color": PART_STYLE[p][1]}, "customdata": [fmt_ns(v) for v in parts[p].tolist()],
             "hovertemplate": "%{x}: %{customdata}<extra>" + PART_STYLE[p][0] + "</extra>"} for p in STEP_PARTS]
    note = "" if len(keep) == len(across) else (
        f"the {len(keep)} slowest of {len(across)} steps (at most {STEP_MAX_BARS} bars)")
    return {"data": data, "note": note,
            "layout": _layout("Per step and rank: where the step time went (ms)", barmode="stack", height=380,
                              yaxis=yaxis, xaxis={"type": "multicategory"})}


# -- skew ----------------------------------------------------------------------------

def skew_heatmap(rep) -> dict | None:
    off = arrival_offsets(rep.op_view.frame, rep.op_view.matched, SKEW_MAX_COLLECTIVES)
    if not off["collectives"]:
        return None
    t0 = int(rep.info["t0_ns"] or 0)
    x = _ms(off["first_start_ns"] - t0).tolist()
    z = np.asarray(off["offset_ns"], dtype=np.float64)
    li, ci = np.nonzero(np.isfinite(z))        # empty where the rank is not a caller
    lanes = [_lane(r, several_worlds(rep.info["rank_list"])) for r in off["ranks"]]
    # One square marker per cell (the page's partial plotly bundle has no heatmap trace).
    size = int(max(4, min(14, 900 // max(len(x), 1))))
    data = [{"type": "scatter", "mode": "markers", "x": ci.tolist(), "y": li.tolist(),
             "marker": {"symbol": "square", "size": size, "color": _ms(z[li, ci], 4).tolist(),
                        "colorscale": "Reds", "cmin": 0, "showscale": True,
                        "colorbar": {"title": {"text": "ms late"}}},
             "hovertemplate": "lane %{y}, collective #%{x}: %{marker.color:.3f} ms after the first caller"
                              "<extra></extra>"}]
    shown = len(x)
    total = off["collectives"]
    note = "" if shown == total else f"the first {fmt_int(shown)} of {fmt_int(total)} collectives"
    return {"data": data, "note": note,
            "layout": _layout("Arrival skew: how late each rank called each collective",
                              height=140 + (size + 3) * len(off["ranks"]),
                              xaxis={"title": {"text": "collective (time order)"}, "zeroline": False},
                              yaxis={"tickmode": "array", "tickvals": list(range(len(lanes))), "ticktext": lanes,
                                     "autorange": "reversed", "zeroline": False})}


def stragglers_figure(rep) -> dict | None:
    st = rep.skew["stragglers"]
    if not len(st):
        return None
    sev = several_worlds(rep.info["rank_list"])
    data = [{"type": "bar", "orientation": "h", "x": _ms(st["wait_ns"]).tolist(),
             "y": [_lane(r, sev) for r in st.index],
             "customdata": [[fmt_int(n), f"{s * 100:.1f}%"] for n, s in zip(st["last"], st["share_last"])],
             "hovertemplate": "%{y}: the others waited %{x:.3f} ms; last in %{customdata[0]} collectives "
                              "(%{customdata[1]})<extra></extra>", "marker": {"color": "#e53935"}}]
    layout = _layout("Stragglers: time the other ranks waited for the last caller (ms)",
                     height=max(200, 60 + 24 * len(st)), yaxis={"type": "category", "autorange": "reversed"})
    return {"data": data, "note": "", "layout": layout}


# -- bandwidth -----------------------------------------------------------------------

def bandwidth_figure(rep) -> dict | None:
    """busbw (filled) and algbw (open) markers per op and size -- no lines: sizes far
    apart are separate measurements. 1-rank groups (nothing crosses a link) and
    collectives with observed (upper-bound) end times are separate, flagged series."""
    bw = bandwidth_by_size(rep.op_view.matched)
    if not len(bw):
        return None
    data = []
    for i, ((op, one, seen), g) in enumerate(bw.groupby(["op", "one_rank", "observed"], sort=True)):
        color = "#9e9e9e" if one else op_color(op, i)
        flag = " (1-rank group: nothing moves)" if one else " (end observed: upper bound, bw too low)" if seen else ""
        sizes = g["size_bytes"].tolist()
        for kind, symbol in (("busbw", "circle"), ("algbw", "circle-open")):
            data.append({"type": "scatter", "mode": "markers", "name": text(op) + " " + kind + flag, "x": sizes,
                         "y": (g[kind] / 1e9).tolist(), "legendgroup": text(op) + flag,
                         "marker": {"color": color, "size": 9, "symbol": symbol + ("-dot" if seen and not one else "")},
                         "customdata": [[fmt_bytes(s), fmt_int(n), fmt_bw(v)]
                                        for s, n, v in zip(sizes, g["collectives"], g[kind])],
                         "hovertemplate": text(op) + flag + " %{customdata[0]} (%{customdata[1]} collectives): "
                                          + kind + " %{customdata[2]}<extra></extra>"})
    notes = []
    if bw["one_rank"].any():
        notes.append("grey: collectives of a 1-rank group move no data; their bandwidth measures a local copy")
    if bw["observed"].any():
        notes.append("dotted markers: end times observed by polling (end_observed), so durations are upper bounds "
                     "and bandwidths lower bounds")
    return {"data": data, "note": "; ".join(notes),
            "layout": _layout("Bandwidth against message size (nccl-tests algbw / busbw, GB/s)", height=380,
                              xaxis={"type": "log", "title": {"text": "message size (bytes)"}},
                              yaxis={"title": {"text": "GB/s"}, "rangemode": "tozero"})}


# -- compare -------------------------------------------------------------------------

COMPARE_CHARTS = [("step_ns", "step time (ms)", 1e-6), ("exposed_ns", "exposed comm (ms)", 1e-6),
                  ("ops", "ops per step", 1.0), ("bytes", "MB per step", 1e-6)]


def compare_figures(cmp: dict) -> list[tuple[str, str, dict]]:
    """(id, title, figure) per chart: per run the compare table's per-step medians (whisker: the
    interquartile range) and busbw, bars coloured by their change against BASE."""
    st, runs = cmp["steps"], cmp["runs"]
    labels = ["BASE"] + [f"EXP{i}" for i in range(1, len(runs))]
    names = [f"{lbl}: {text(r)}" for lbl, r in zip(labels, runs)]
    out = []
    if any(w["steps_shown"] for w in cmp["windows"]):
        for stat, title, scale in COMPARE_CHARTS:
            rows = [st.loc[(r, stat)] for r in runs]
            med = [float(r["median"]) * scale for r in rows]
            p25 = [float(r.get("p25", np.nan)) * scale for r in rows]
            p75 = [float(r.get("p75", np.nan)) * scale for r in rows]
            colors = [_delta_color(stat, r, i) for i, r in enumerate(rows)]
            out.append((f"compare-{stat.replace('_ns', '')}", title, _compare_bars(
                names, med, colors, title, [None if h != h else max(h - m, 0) for h, m in zip(p75, med)],
                [None if lo != lo else max(m - lo, 0) for lo, m in zip(p25, med)])))
    bus = [float(b) / 1e9 if b == b else None for b in cmp["busbw"]]
    if any(b is not None for b in bus):
        out.append(("compare-busbw", "busbw (GB/s)",
                    _compare_bars(names, bus, ["#1f77b4"] * len(bus), "busbw over every collective (GB/s)")))
    return out


def _delta_color(stat: str, row, i: int) -> str:
    if i == 0:
        return "#1f77b4"
    d = float(row.get("delta_pct", np.nan))
    if d != d or bool(row.get("within_noise", False)):
        return "#9e9e9e"
    if stat in ("ops", "bytes"):
        return "#7e57c2"          # neither better nor worse: a different schedule
    return "#43a047" if d < 0 else "#e53935"   # a time: lower is better


def _compare_bars(names, values, colors, title, plus=None, minus=None) -> dict:
    trace = {"type": "bar", "x": names, "y": values, "marker": {"color": colors}, "showlegend": False,
             "hovertemplate": "%{x}: %{y:.4~f}<extra></extra>"}
    if plus is not None and any(v is not None for v in plus):
        trace["error_y"] = {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus,
                            "color": "#424242", "thickness": 1}
    return {"data": [trace], "note": "",
            "layout": _layout(title, height=300, yaxis={"rangemode": "tozero"}, margin={"l": 60, "r": 20, "t": 40,
                                                                                      "b": 60})}
