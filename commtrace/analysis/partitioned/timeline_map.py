"""The terminal timeline (``analysis.timeline``) of a run analysed by map/reduce.

A lane depends only on its rank's ops, the run's first op (t0), the binned range, the number of
cells and the op legend (``timeline.occupancy``). The range (the window's extent or the last op
end) and the legend (every file's op names) are known only once map 1 has returned, so the
timeline is one more map, a task per rank, run only when it is printed. A task gathers its rank's
ops as map 1 does, keeps those in the window (``window.apply``'s rule) and bins them alone into
its lane, with its marks in the window; the fold stacks the lanes in rank order. The same code
bins the same ops in the same order as ``bin_timeline``: the one-frame timeline to the character."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace import reader
from ..timeline import Timeline, cell_range, lane_cells, occupancy, timeline_layout, timeline_range
from ..window import Window, in_bounds
from .cpp_layer import rank_ops_of
from .plan import cached_process, read_rank
from .windowing import all_bounds


@dataclass
class TimelineTask:
    rank: int
    metas: list                 # meta paths of the rank's processes
    refs: dict                  # world id -> meta path of the reference (rank-0) process
    lane: bool                  # the rank has ops in the window (else only its marks are read)
    bounds: dict | None         # the window's interval per rank (windowing.all_bounds), None: no range
    phases: tuple | None        # the window's phases, None: any
    t0: int                     # the run's first op start
    lo: int                     # the binned range relative to t0 (timeline.cell_range)
    hi: int
    width: int                  # cells
    op_names: list              # the legend: op names in the one frame's category order
    world: int | None = None    # the rank's world number when the run has several (plan.RunPlan.worlds)


@dataclass
class TimelinePartial:
    rank: int
    cells: np.ndarray | None    # per cell: index into op_names of the op filling most of it, -1: empty
    fill: np.ndarray | None     # per cell: how much of it ops fill
    marks: pd.DataFrame | None  # the rank's marks in the window (reader.build_mark_tables' columns)


def map_timeline(task: TimelineTask) -> TimelinePartial:
    procs, refs = read_rank(task.metas, task.refs, [], records=task.lane, ref_of=cached_process,
                            world=task.world)
    marks = _marks(procs, refs, task.bounds)
    if not task.lane:
        return TimelinePartial(task.rank, None, None, marks)
    ops = rank_ops_of(procs, refs, task.rank)[0]
    nops = max(len(task.op_names), 1)
    if ops is None:
        return TimelinePartial(task.rank, np.full(task.width, -1), np.zeros(task.width), marks)
    a = ops.arrays
    keep = _in_window(task, a.start, ops)
    index = {name: i for i, name in enumerate(task.op_names)}
    opc = np.array([index.get(c[3], -1) for c in ops.cells], np.int64)[ops.cell[keep]]
    occ = occupancy(np.zeros(len(opc), np.int64), 1, opc, nops, a.start[keep] - task.t0, a.end[keep] - task.t0,
                    task.lo, task.hi, task.width)
    cells, fill = lane_cells(occ)
    return TimelinePartial(task.rank, cells[0], fill[0], marks)


def _in_window(task: TimelineTask, start: np.ndarray, ops) -> np.ndarray:
    """The rank's ops in the window: starting inside its interval, of one of the phases (window.apply)."""
    keep = np.ones(len(start), dtype=bool)
    if task.bounds is not None:
        lo, hi = task.bounds.get(task.rank, (0, 0))
        keep &= (start >= lo) & (start <= hi) & (hi > lo)
    if task.phases is not None:
        phase_in = np.array([c[2] in task.phases for c in ops.cells], bool)
        keep &= phase_in[ops.cell] if len(phase_in) else False
    return keep


def _marks(procs: list, refs: dict, bounds: dict | None) -> pd.DataFrame | None:
    """The processes' marks in the window (window.in_bounds), None: none."""
    if not any(p.marks for p in procs):
        return None
    marks = reader.build_mark_tables(procs, [], refs)[1]
    if bounds is not None and len(marks):
        t = marks["t_ns"].to_numpy(np.int64)
        marks = marks[in_bounds(marks["rank"].to_numpy(), t, t, bounds)].reset_index(drop=True)
    return marks if len(marks) else None


def timeline_tasks(plan, ranks, window, console_width: int, rank_list: list) -> list[TimelineTask]:
    """One task per rank of the run (``plan``: plan.RunPlan; ``ranks``: merge.RankFold of map 1) for a
    timeline in a console ``console_width`` wide (timeline.timeline_layout)."""
    t0 = ranks.t0 or 0
    bounds = all_bounds(ranks.windows)
    window = window or Window()
    t_from, t_to = timeline_range(bounds, t0, window)
    ends = [f.last_end for f in ranks.facts if f.last_end is not None]
    lo, hi = cell_range(t_from, t_to, max(ends) - t0 if ends else None)
    width = max(timeline_layout(console_width, rank_list)[1], 1)
    names = ranks.op_order()
    return [TimelineTask(r, metas, plan.refs, ranks.ops_per_rank.get(r, 0) > 0, bounds, window.phases, t0, lo, hi,
                         width, names, plan.worlds.get(metas[0])) for r, metas in plan.ranks.items()]


class TimelineFold:
    """The lanes, in rank order, and the marks of the lowest rank that has any in the window."""

    def __init__(self, tasks: list[TimelineTask]):
        self.first = tasks[0] if tasks else None
        self.lanes: dict = {}
        self.marks = None

    def add(self, p: TimelinePartial) -> None:
        if p.cells is not None:
            self.lanes[p.rank] = (p.cells, p.fill)
        if p.marks is not None and (self.marks is None or p.rank < int(self.marks["rank"].min())):
            self.marks = p.marks

    def timeline(self) -> Timeline | None:
        t = self.first
        if t is None:
            return None
        ranks = sorted(self.lanes)
        shape = (len(ranks), t.width)
        cells = np.stack([self.lanes[r][0] for r in ranks]) if ranks else np.full(shape, -1)
        fill = np.stack([self.lanes[r][1] for r in ranks]) if ranks else np.zeros(shape)
        return Timeline(ranks, list(map(str, t.op_names)), cells, fill, t.lo, t.hi, t.t0)
