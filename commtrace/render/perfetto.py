"""Chrome trace-event JSON for ui.perfetto.dev / chrome://tracing, written in streamed chunks.

One process per rank ("rank N"); every op is a complete ("X") slice carrying every
recorded field in ``args``; ops that overlap on a rank (async) go to extra tracks
(tids) so no track has mis-nested slices; flow arrows ("s" -> "f", bp "e") link the
same collective (or send/recv pair) across ranks in arrival order. Timestamps are
microseconds relative to the first op (``t0``).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..analysis.arrays import column_codes, equal_runs
from ..analysis.report import json_safe
from ..analysis.steps import compute_spans
from ..errors import CommtraceError
from ..trace.rank_ranges import WORLD_STRIDE, rank_name, several_worlds
from ..trace.schema import P2P_OPS

# Per-row fields; everything else in the frame is "static" (the same for many rows)
# and serialized once per distinct combination.
_ROW_FIELDS = ("seq", "t_start_ns", "t_return_ns", "t_end_ns", "duration_ns", "status", "iteration", "error")
CHUNK = 20_000


def assign_lanes(rank: np.ndarray, start: np.ndarray, end: np.ndarray, small: int = 8) -> np.ndarray:
    """Per row (sorted by start) a track (0..) so that slices on one (rank, track) never overlap: per
    cluster of transitively overlapping ops, the k-th of up to ``small`` on track k, more packed greedily."""
    lane = np.zeros(len(rank), dtype=np.int64)
    if len(rank) == 0:
        return lane
    order = np.argsort(rank, kind="stable")
    for _, lo, hi in equal_runs(rank[order]):
        idx = order[lo:hi]
        s, e = start[idx], end[idx]
        prev = np.maximum.accumulate(e)
        new = np.concatenate(([True], s[1:] >= prev[:-1]))
        if new.all():
            continue
        cid = np.cumsum(new) - 1
        first = np.flatnonzero(new)
        pos = np.arange(len(idx)) - first[cid]
        size = np.diff(np.concatenate((first, [len(idx)])))
        out = pos.copy()
        for c in np.flatnonzero(size > small).tolist():
            a, b = first[c], first[c] + size[c]
            ends: list[int] = []
            for i, (si, ei) in enumerate(zip(s[a:b].tolist(), e[a:b].tolist())):
                for k, ek in enumerate(ends):
                    if ek <= si:
                        ends[k] = ei
                        out[a + i] = k
                        break
                else:
                    out[a + i] = len(ends)
                    ends.append(ei)
        lane[idx] = out
    return lane


def _static_codes(frame: pd.DataFrame, cols: list[str]) -> np.ndarray:
    code = np.zeros(len(frame), dtype=np.int64)
    for c in cols:
        col = frame[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            cc, n = col.cat.codes.to_numpy().astype(np.int64) + 1, len(col.cat.categories) + 1
        else:
            cc, u = pd.factorize(col, use_na_sentinel=False)
            cc, n = cc.astype(np.int64), len(u)
        code, _ = pd.factorize(code * n + cc)
        code = code.astype(np.int64)
    return code


def _json_per_row(col: pd.Series, missing: str, fmt=json.dumps) -> np.ndarray:
    """Per row, ``fmt`` of its value as text (``missing`` where NA): one call per distinct value."""
    codes, keys = column_codes(col)
    return np.array([fmt(k) for k in keys[:-1]] + [missing], dtype=object)[codes]


def _num_strs(col: pd.Series, order: np.ndarray) -> np.ndarray:
    """A nullable integer column as JSON number strings ("null" for NA), permuted by order."""
    arr = col.array
    if isinstance(arr, pd.arrays.IntegerArray):
        vals, mask = arr._data[order], arr._mask[order]
    else:
        v = col.to_numpy(dtype=np.float64, na_value=np.nan)[order]
        mask = np.isnan(v)
        vals = np.where(mask, 0, v).astype(np.int64)
    out = vals.astype(str).astype(object)
    out[mask] = "null"
    return out


COMPUTE_TID = 1_000_000   # each rank's compute spans (forward, backward, optimizer)
REGION_TID = 1_000_001    # each rank's commtrace.region intervals


def write_perfetto(frame: pd.DataFrame, path: str, t0: int | None = None, inst: np.ndarray | None = None,
                   processes: list[dict] | None = None, spans: pd.DataFrame | None = None,
                   marks: pd.DataFrame | None = None, regions: pd.DataFrame | None = None) -> dict:
    """Write the trace; returns counts {"slices", "flows", "tracks", "spans", "marks", "regions"}.
    Compute ``spans`` and ``regions`` are slices on a track of their own per rank, ``marks`` instants."""
    n = len(frame)
    try:
        f = open(path, "w", encoding="utf-8")
    except OSError as e:
        raise CommtraceError(f"{path}: cannot write ({e.strerror})") from None
    with f:
        return _write(f, frame, n, t0, inst, processes, _nonempty(spans), _nonempty(marks), _nonempty(regions))


def _nonempty(table):
    return table if table is not None and len(table) else None


def _write(f, frame, n, t0, inst, processes, spans, marks, regions) -> dict:
    start = frame["t_start_ns"].to_numpy(dtype=np.int64) if n else np.empty(0, np.int64)
    if n and not np.all(np.diff(start) >= 0):
        frame = frame.sort_values("t_start_ns", kind="stable").reset_index(drop=True)
        start = frame["t_start_ns"].to_numpy(dtype=np.int64)
        inst = None
    firsts = [int(start.min())] if n else []
    for table, col in ((spans, "t_begin_ns"), (marks, "t_ns"), (regions, "t_begin_ns")):
        if table is not None:
            firsts.append(int(table[col].min()))
    t0 = min(firsts + ([] if t0 is None else [int(t0)]), default=0)   # timestamps are never negative
    rank = frame["rank"].to_numpy(dtype=np.int64) if n else np.empty(0, np.int64)
    pid = np.where(rank >= 0, rank, 1_000_000)
    if n:
        ret = frame["t_return_ns"].array
        endv = frame["t_end_ns"].array
        last = int(max(np.max(np.where(endv._mask, 0, endv._data)), np.max(start)))
        end = np.where(endv._mask, np.where(ret._mask, last, ret._data), endv._data).astype(np.int64)
        end = np.maximum(end, start)
    else:
        end = np.empty(0, np.int64)
    lane = assign_lanes(rank, start, end)
    f.write('{"displayTimeUnit":"ns","otherData":{"generator":"commtrace"},"traceEvents":[\n')
    # -- metadata ---------------------------------------------------------------
    meta = []
    ranks = set(rank.tolist())
    for table in (spans, marks, regions):
        if table is not None:
            ranks.update(int(r) for r in table["rank"].unique())
    ranks = sorted(ranks)
    hosts = {p.get("rank"): p.get("host") for p in (processes or [])}

    def add_meta(name: str, p: int, tid: int, args: dict) -> None:
        meta.append(json.dumps({"ph": "M", "name": name, "pid": p, "tid": tid, "args": args}))

    several = several_worlds(ranks)
    for r in ranks:
        add_meta("process_name", _pid(r), 0, {"name": f"rank {rank_name(r, several)}" if r >= 0 else "rank ?"})
        add_meta("process_sort_index", _pid(r), 0, {"sort_index": _pid(r)})
        if hosts.get(r):
            add_meta("process_labels", _pid(r), 0, {"labels": str(hosts[r])})
    tracks = sorted(set(zip(pid.tolist(), lane.tolist()))) if n else []
    for p, t in tracks:
        add_meta("thread_name", p, t, {"name": "ops" if t == 0 else f"overlapping ops {t}"})
    for table, tid, label in ((spans, COMPUTE_TID, "compute (forward, backward, optimizer)"),
                              (regions, REGION_TID, "regions")):
        if table is not None:
            for r in sorted(int(x) for x in table["rank"].unique()):
                add_meta("thread_name", _pid(r), tid, {"name": label})
                add_meta("thread_sort_index", _pid(r), tid, {"sort_index": -2 if tid == COMPUTE_TID else -1})
    f.write(",\n".join(meta))
    wrote = bool(meta)
    counts = _write_annotations(f, wrote, t0, spans, marks, regions)
    wrote = wrote or any(counts.values())
    if n == 0:
        f.write("\n]}\n")
        return {"slices": 0, "flows": 0, "tracks": 0, **counts}
    # -- slices -----------------------------------------------------------------
    static_cols = [c for c in frame.columns if c not in _ROW_FIELDS]
    scode = _static_codes(frame, static_cols)
    first = pd.Series(np.arange(n)).groupby(scode, sort=True).first().to_numpy()
    frags = []
    shown = frame.assign(rank=np.where(rank >= 0, rank % WORLD_STRIDE, rank)) if several else frame   # args: as load()
    for row in first.tolist():
        d = {c: v for c in static_cols if (v := json_safe(shown[c].iat[row])) is not None}  # nulls: not recorded
        frags.append(json.dumps(d, ensure_ascii=False, separators=(",", ":"), default=str)[1:-1])
    names = _json_per_row(frame["op"], '"?"')
    p2p = frame["op"].isin(P2P_OPS).to_numpy()
    status = _json_per_row(frame["status"], "null")
    err = frame["error"] if "error" in frame else None
    order = np.lexsort((start, lane, pid))   # per track, in time order
    rel = start - t0
    dur = end - start
    frag_arr = np.array(frags, dtype=object)
    cols = [pid[order], lane[order], rel[order] // 1000, rel[order] % 1000, dur[order] // 1000, dur[order] % 1000,
            names[order], np.where(p2p, '"p2p"', '"collective"')[order], frag_arr[scode[order]],
            frame["seq"].to_numpy()[order], start[order], _num_strs(frame["t_return_ns"], order),
            _num_strs(frame["t_end_ns"], order), _num_strs(frame["duration_ns"], order), status[order],
            frame["iteration"].to_numpy()[order]]
    has_err = err is not None and err.notna().any()
    if has_err:
        ev = err.astype(object).to_numpy()[order]
        cols.append(np.array(["" if v is None or v != v else ',"error":' + json.dumps(str(v), ensure_ascii=False)
                              for v in ev.tolist()], dtype=object))
    fmt = ('{{"ph":"X","pid":{},"tid":{},"ts":{}.{:03d},"dur":{}.{:03d},"name":{},"cat":{},"args":{{{},'
           '"seq":{},"t_start_ns":{},"t_return_ns":{},"t_end_ns":{},"duration_ns":{},"status":{},"iteration":{}'
           + ("{}" if has_err else "") + "}}}}").format
    wrote = _write_rows(f, wrote, fmt, cols)
    # -- flows: consecutive arrivals of one instance ----------------------------
    nflows = 0
    if inst is None:
        from ..analysis.match import instance_keys
        inst = instance_keys(frame)
    if len(inst):
        o = np.lexsort((start, inst))
        a, b = o[:-1], o[1:]
        pair = inst[a] == inst[b]
        a, b = a[pair], b[pair]
        nflows = len(a)
        fid = np.arange(1, nflows + 1)
        fmt = ('{{"ph":"s","id":{},"pid":{},"tid":{},"ts":{}.{:03d},"name":{},"cat":"match"}},\n{{"ph":"f",'
               '"bp":"e","id":{},"pid":{},"tid":{},"ts":{}.{:03d},"name":{},"cat":"match"}}').format
        ends = [(fid, pid[x], lane[x], rel[x] // 1000, rel[x] % 1000, names[x]) for x in (a, b)]
        wrote = _write_rows(f, wrote, fmt, [*ends[0], *ends[1]])
    f.write("\n]}\n")
    return {"slices": n, "flows": nflows, "tracks": len(tracks), **counts}


def _write_annotations(f, wrote: bool, t0: int, spans, marks, regions) -> dict:
    """Compute spans and regions as X slices on their own tracks, marks as instant events."""
    events = []
    nspans = 0
    if spans is not None:   # vectorized like the ops: there can be as many spans as ops
        nspans = len(spans)
        rel = spans["t_begin_ns"].to_numpy(np.int64) - t0
        dur = spans["t_end_ns"].to_numpy(np.int64) - spans["t_begin_ns"].to_numpy(np.int64)
        phase = _json_per_row(spans["phase"], '"?"')
        module = _json_per_row(spans["module"], "", lambda m: ',"module":' + json.dumps(m,
                                                                                      ensure_ascii=False))
        rank = spans["rank"].to_numpy(np.int64)
        cols = [np.where(rank >= 0, rank, 1_000_000), rel // 1000, rel % 1000, dur // 1000, dur % 1000, phase,
                phase, spans["step"].to_numpy(), spans["iteration"].to_numpy(), module]
        fmt = ('{{"ph":"X","pid":{},"tid":' + str(COMPUTE_TID) + ',"ts":{}.{:03d},"dur":{}.{:03d},"name":{},'
               '"cat":"compute","args":{{"phase":{},"step":{},"iteration":{}{}}}}}').format
        wrote = _write_rows(f, wrote, fmt, cols)
    if regions is not None:
        for r in regions.itertuples(index=False):
            events.append({"ph": "X", "pid": _pid(r.rank), "tid": REGION_TID, "ts": (r.t_begin_ns - t0) / 1e3,
                           "dur": (r.t_end_ns - r.t_begin_ns) / 1e3, "name": str(r.label), "cat": "region",
                           "args": {"closed": bool(r.closed)}})
    if marks is not None:
        for r in marks.itertuples(index=False):
            events.append({"ph": "i", "s": "p", "pid": _pid(r.rank), "tid": COMPUTE_TID, "ts": (r.t_ns - t0) / 1e3,
                           "name": str(r.label), "cat": "mark"})
    if events:
        f.write((",\n" if wrote else "") + ",\n".join(json.dumps(e, ensure_ascii=False, separators=(",", ":"))
                                                     for e in events))
    return {"spans": nspans, "marks": 0 if marks is None else len(marks),
            "regions": 0 if regions is None else len(regions)}


def _write_rows(f, wrote: bool, fmt, cols: list) -> bool:
    """One event per row of the arrays ``cols`` (``fmt`` of its values), CHUNK rows per write, after a
    separator if ``wrote``; returns whether anything was written."""
    for lo in range(0, len(cols[0]), CHUNK):
        part = [c[lo:lo + CHUNK].tolist() for c in cols]
        f.write((",\n" if wrote else "") + ",\n".join(map(fmt, *part)))
        wrote = True
    return wrote


def _pid(rank) -> int:
    rank = int(rank)
    return rank if rank >= 0 else 1_000_000


# -- a run too big to hold whole: files of at most --perfetto-max-mb --------------------

# Perfetto JSON per op, flows included (docs/report-performance.md: 908 MB for 1 M ops + 0.9 M flows).
PERFETTO_BYTES_PER_OP = 1000


def write_perfetto_pieces(path: str, s, max_mb: float) -> list[str]:
    """Files of at most ``max_mb`` MB (at PERFETTO_BYTES_PER_OP), each some ranks or a time window of
    one rank (analysis.partitioned.perfetto_pieces), on one time base. Every op, span, mark and
    region is in exactly one file: a window holds those starting in it (a span crossing its end whole)."""
    from ..analysis.match import match_ops
    from ..analysis.partitioned import load_ranks, perfetto_pieces, piece_span, scan
    parts = {p.rank: p for p in scan(s.path)}
    t0 = _time_base(s, parts.values())
    ops = {r: int(c) for r, c in s.ops_per_rank.items()}
    max_ops = max(1, int(max_mb * 1e6 / PERFETTO_BYTES_PER_OP))
    several = several_worlds(ops)
    base, ext = (path[:-5], ".json") if path.endswith(".json") else (path, ".json")
    written = []
    for ranks, piece, pieces in perfetto_pieces(ops, max_ops):
        run = _in_window(load_ranks([parts[r] for r in ranks]), s)
        frame, spans, marks, regions = run.frame, compute_spans(run.spans), run.marks, run.regions
        if piece is not None:          # a time window of one rank: its ops [lo, hi) in start order
            frame = frame.sort_values("t_start_ns", kind="stable", ignore_index=True)
            lo, hi, t_lo, t_hi = piece_span(frame["t_start_ns"].to_numpy(np.int64), piece, pieces)
            frame = frame.iloc[lo:hi].reset_index(drop=True)
            spans = _starting_in(spans, "t_begin_ns", t_lo, t_hi)
            marks = _starting_in(marks, "t_ns", t_lo, t_hi)
            regions = _starting_in(regions, "t_begin_ns", t_lo, t_hi)
        first, last = (rank_name(r, several).replace(":", "") for r in (ranks[0], ranks[-1]))   # w1r0
        name = f"ranks-{first}-{last}" if len(ranks) > 1 else f"rank-{first}"
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
        for table, col in zip(tables_in_window(*part.mark_tables(rank_keys=True), s.bounds),
                              ("t_begin_ns", "t_ns", "t_begin_ns")):
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
    """Some ranks' reader.Run cut to the window of Report ``s`` (as windowing and op_view cut them)."""
    from ..analysis.partitioned.windowing import frame_in_window
    from ..analysis.partitioned.op_view import tables_in_window
    phases = s.window.phases
    if s.bounds is None and phases is None:
        return run
    return type(run)(run.path, frame_in_window(run.frame, s.bounds, phases), run.processes, run.issues,
                     *tables_in_window(run.spans, run.marks, run.regions, s.bounds))
