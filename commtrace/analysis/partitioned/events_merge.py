"""``report --events`` of a run analysed by map/reduce: every op of the window in the one frame's
order (start, rank, the rank's files in name order, file order), streamed: a k-way merge of one
ordered stream per trace file.

A record is written when its op finishes, so an async op that finishes late sits after ops called
later, and an op still running at a flush is written twice (docs/trace-format.md). A first pass
over the file (in blocks) sets aside those few "late" records (called before one earlier in the
file), sorted; the others are in order and read in chunks. A chunk is the in-order records up to
a time (a run of equal times is never cut) and the late ones up to it, deduplicated as the reader
does (``records.last_record_per_op``: an op's two records share their call time, so one chunk has
both), sorted by (time, file position) and made frame rows by ``reader.build_frame``. Chunks of a
stream never share a time, so the merge may emit every buffered row up to the least "last time"
of the open streams (the horizon). Memory: one chunk per file, and the late records.

Ranks with a C++-layer file (merged into the Python rows) or a bounded (ring) trace are one
stream each, read whole: the frame of that rank."""
from __future__ import annotations

import dataclasses
import os
from typing import Iterator

import numpy as np
import pandas as pd

from ...errors import CommtraceError
from ...trace import reader, records, schema
from ..timeline import event_rows
from .bounded_files import is_bounded
from .windowing import frame_in_window

# Records a first pass reads at once (32 MB), and the least chunk of a stream.
BLOCK = 1 << 20
MIN_CHUNK = 256
# A chunk's bytes per record while it is buffered (records, frame rows, event rows), with headroom.
CHUNK_BYTES_PER_OP = 600
_NEVER = np.iinfo(np.int64).min


@dataclasses.dataclass
class EventWindow:
    t0: int                     # the run's first op start: event times count from it
    bounds: dict | None         # the window's interval per rank (None: no time range)
    phases: tuple | None        # its phases (None: any)
    t_from: int | None          # the events' range relative to t0 (render.events.window_range)
    t_to: int | None

    def rows(self, frame: pd.DataFrame) -> pd.DataFrame:
        """event_rows of a frame's ops in the window."""
        return event_rows(frame_in_window(frame, self.bounds, self.phases), self.t0, self.t_from, self.t_to)


def chunk_for(memory_limit: int, files: int) -> int:
    """Records per chunk so that two chunks of every file (what the merge buffers) fit a quarter
    of ``memory_limit``."""
    return int(max(MIN_CHUNK, min(BLOCK, memory_limit // 8 // max(files, 1) // CHUNK_BYTES_PER_OP)))


def merged_events(ranks: dict, refs: dict, win: EventWindow, chunk: int, worlds: dict | None = None) \
        -> Iterator[pd.DataFrame]:
    """The window's events of every rank (``ranks``: rank key -> its meta paths, in name order;
    ``refs``: world id -> meta path of its reference process; ``worlds``: meta path -> world number,
    plan.RunPlan.worlds) as consecutive event_rows frames, ranks given as rank keys."""
    worlds = worlds or {}
    ref_procs = {w: p for w, p in ((w, reader.read_process(m, [], records=False)) for w, m in refs.items())
                 if p is not None}
    streams = []
    for rank, metas in sorted(ranks.items()):
        procs = [p for p in (reader.read_process(m, [], records=False) for m in metas) if p is not None]
        for p in procs:
            p.world_number = worlds.get(p.meta_path)
        if any(is_bounded(p) or p.header.get("source") == "cpp" for p in procs):
            streams.append(_whole_rank(metas, refs, win.t0, worlds.get(metas[0])))
        else:
            streams.extend(_file_chunks(p, ref_procs.get(p.world_id), win.t0, chunk) for p in procs)
    try:
        for parts in _merge(streams, chunk * max(len(streams), 1)):
            yield win.rows(_frame_of(parts, ref_procs))
    except OSError as e:      # a file removed or unreadable while the list was printed
        raise CommtraceError(f"{e.filename or 'a trace file'}: cannot read ({e.strerror}) while listing the "
                             "events") from None


@dataclasses.dataclass
class _Part:
    """Ops of one stream in order: a file's records (``pt``: its process) or a whole rank's frame."""
    t: np.ndarray               # their starts relative to t0
    rec: np.ndarray | None = None
    pt: object = None
    frame: pd.DataFrame | None = None

    def join(self, other: "_Part") -> "_Part":
        return _Part(np.concatenate((self.t, other.t)), np.concatenate((self.rec, other.rec)), self.pt)

    def cut(self, k: int) -> tuple:
        """(the first ``k`` ops, the others)."""
        if self.frame is not None:
            return _Part(self.t[:k], frame=self.frame.iloc[:k]), _Part(self.t[k:], frame=self.frame.iloc[k:])
        return _Part(self.t[:k], self.rec[:k], self.pt), _Part(self.t[k:], self.rec[k:], self.pt)


def _frame_of(parts: list, ref_procs: dict) -> pd.DataFrame:
    """The frame rows of some streams' ops in the one frame's order: the files' records by one
    reader.build_frame (it orders by start, then rank, then process: the streams' order), a whole
    rank's rows merged in by (start, rank)."""
    procs = [dataclasses.replace(p.pt, records=p.rec) for p in parts if p.frame is None]
    frames = [reader.build_frame(procs, ref_procs)] if procs else []
    frames += [p.frame for p in parts if p.frame is not None]
    if len(frames) == 1:
        return frames[0]
    out = pd.concat(frames, ignore_index=True)
    order = np.lexsort((out["rank"].to_numpy(np.int64), out["t_start_ns"].to_numpy(np.int64)))
    return out.iloc[order].reset_index(drop=True)


def _merge(streams: list, target: int) -> Iterator[list]:
    """Ops of every stream (each yields (a _Part, the last time it has covered)) in time order:
    lists of parts (at least ``target`` ops, but the last) whose ops come before every op not
    yet given out. The stream that has covered the least time is read on until ``target`` ops
    can be given out: the buffers hold fewer than ``target`` ops below the horizon plus one chunk
    per stream above it."""
    bufs: list = [None] * len(streams)
    last: list = [None] * len(streams)           # None: the stream is done
    for i in range(len(streams)):
        _read_on(streams, bufs, last, i)
    while any(b is not None and len(b.t) for b in bufs) or any(v is not None for v in last):
        open_ = [(v, i) for i, v in enumerate(last) if v is not None]
        horizon, first = min(open_) if open_ else (None, None)
        ready = [0 if b is None else len(b.t) if horizon is None else int(np.searchsorted(b.t, horizon, "right"))
                 for b in bufs]
        if horizon is not None and sum(ready) < target:
            _read_on(streams, bufs, last, first)
            continue
        parts = []
        for i, k in enumerate(ready):
            if k:
                head, bufs[i] = bufs[i].cut(k)
                parts.append(head)
        yield parts


def _read_on(streams: list, bufs: list, last: list, i: int) -> None:
    """Stream ``i``'s next part, after what it has buffered."""
    try:
        part, last[i] = next(streams[i])
    except StopIteration:
        last[i] = None
        return
    b = bufs[i]
    bufs[i] = part if b is None or not len(b.t) else b.join(part)


def _whole_rank(metas: list, refs: dict, t0: int, world: int | None):
    """One stream of a rank read whole (its frame as load() has it, ranks as rank keys)."""
    from . import RankPart
    frame = RankPart(-1, metas, refs, world).load(rank_keys=True)
    t = frame["t_start_ns"].to_numpy(np.int64) - t0 if len(frame) else np.empty(0, np.int64)
    yield _Part(t, frame=frame), (int(t.max()) if len(t) else _NEVER)


def _valid(rec: np.ndarray, pt) -> np.ndarray:
    """The records the reader reads (reader.read_records' checks)."""
    return records.valid(rec, records.defined_ids(pt.sigs), records.defined_ids(pt.groups))


def _late_records(pt, count: int, aligned) -> tuple:
    """(records, positions, times) of the valid records called before a valid record earlier in the
    file, sorted by (time, position): one pass over the file in blocks."""
    recs, poss, ts = [], [], []
    seen = _NEVER      # the latest call time of the valid records before the block
    for b0 in range(0, count, BLOCK):
        rec = records.read_slice(pt.ops_path, b0, min(BLOCK, count - b0))
        if not len(rec):
            break
        ok = _valid(rec, pt)
        t = aligned(rec["t_call"])
        upto = np.maximum.accumulate(np.where(ok, t, _NEVER))          # latest valid time up to each record
        before = np.maximum(np.concatenate(([_NEVER], upto[:-1])), seen)
        late = ok & (t < before)
        if late.any():
            recs.append(rec[late])
            poss.append(b0 + np.flatnonzero(late))
            ts.append(t[late])
        seen = max(seen, int(upto[-1]))
    if not recs:
        return np.empty(0, schema.OP_RECORD), np.empty(0, np.int64), np.empty(0, np.int64)
    rec, pos, t = np.concatenate(recs), np.concatenate(poss), np.concatenate(ts)
    order = np.lexsort((pos, t))
    return rec[order], pos[order], t[order]


def _file_chunks(pt, ref, t0: int, chunk: int):
    """One file's ops in order, chunk by chunk: (a _Part of its records, the last time covered,
    relative to t0)."""
    try:
        count = os.path.getsize(pt.ops_path) // schema.RECORD_SIZE     # a torn last record is not read
    except OSError:
        return
    aligned = records.aligner(pt, ref)

    late_rec, late_pos, late_t = _late_records(pt, count, aligned)
    rec, p, t = np.empty(0, schema.OP_RECORD), np.empty(0, np.int64), np.empty(0, np.int64)   # carried over
    taken = 0          # late records given out
    pos = 0
    while True:
        n = min(chunk, count - pos)
        if n > 0:
            new = records.read_slice(pt.ops_path, pos, n)
            at = pos + np.arange(len(new))
            keep = _valid(new, pt)
            if len(late_pos):
                keep &= ~np.isin(at, late_pos)
            new, at = new[keep], at[keep]
            rec, p, t = np.concatenate((rec, new)), np.concatenate((p, at)), np.concatenate((t, aligned(new["t_call"])))
            pos += n
        if pos < count:
            cut = int(np.searchsorted(t, t[-1], "left")) if len(t) else 0   # the last time's run may go on
            if cut == 0:
                continue
            out, out_p, upto = rec[:cut], p[:cut], int(t[cut - 1])
            rec, p, t = rec[cut:], p[cut:], t[cut:]
        else:
            out, out_p, upto = rec, p, None
        end = len(late_t) if upto is None else int(np.searchsorted(late_t, upto, "right"))
        if end > taken:
            out, out_p = np.concatenate((out, late_rec[taken:end])), np.concatenate((out_p, late_pos[taken:end]))
            taken = end
        if len(out):
            out = records.last_record_per_op(out[np.argsort(out_p, kind="stable")])   # the reader's dedup
            t_out = aligned(out["t_call"])
            order = np.argsort(t_out, kind="stable")
            part = _Part(t_out[order] - t0, out[order], pt)
            yield part, (int(part.t[-1]) if upto is None else upto - t0)
        if upto is None:
            return
