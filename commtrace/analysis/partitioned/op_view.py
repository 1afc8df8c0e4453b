"""Every op of a report's window in one frame, for the views that draw each op (the HTML
timeline, arrival heatmap and bandwidth plot; one Perfetto, CSV or Parquet file).

The report's figures never need it (``analyse`` folds file by file); it is loaded only
when the run fits in memory (``Report.whole``) and a view asks for it. Its rows are the
ops the report counts: the run's frame (``commtrace.load``) cut to the window's
interval per rank and its phases (``windowing.frame_in_window``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..arrays import OpArrays
from ..match import Matched, match_ops
from ..run_info import load_report_run
from ..steps import compute_spans
from ..window import in_bounds
from .windowing import frame_in_window


@dataclass
class OpView:
    frame: pd.DataFrame         # the ops in the window, one row per op per rank (reader.build_frame's columns)
    arrays: OpArrays            # of ``frame``
    matched: Matched            # of ``frame``
    spans: pd.DataFrame         # compute spans overlapping the window
    marks: pd.DataFrame         # user marks inside the window
    region_spans: pd.DataFrame  # user region intervals overlapping the window
    bounds: dict | None         # the window per rank: rank -> (lo, hi) ns; None = the whole run


def load_op_view(path: str, bounds: dict | None, phases: tuple | None) -> OpView:
    """The ops of run ``path`` in the window given by ``bounds`` and ``phases`` (a report's)."""
    run = load_report_run(path)
    frame = frame_in_window(run.frame, bounds, phases)
    a = OpArrays.of(frame)
    spans, marks, regions = tables_in_window(compute_spans(run.spans), run.marks, run.regions, bounds)
    return OpView(frame, a, match_ops(frame, a), spans, marks, regions, bounds)


def tables_in_window(spans, marks, regions, bounds: dict | None) -> tuple:
    """(spans, marks, regions) cut to the rows overlapping their rank's interval (None / empty: as given)."""
    return (_within(spans, "t_begin_ns", "t_end_ns", bounds), _within(marks, "t_ns", "t_ns", bounds),
            _within(regions, "t_begin_ns", "t_end_ns", bounds))


def _within(table: pd.DataFrame | None, begin: str, end: str, bounds: dict | None) -> pd.DataFrame:
    if table is None:
        return pd.DataFrame()
    if not len(table) or bounds is None:
        return table
    keep = in_bounds(table["rank"].to_numpy(), table[begin].to_numpy(np.int64), table[end].to_numpy(np.int64), bounds)
    return table[keep].reset_index(drop=True)
