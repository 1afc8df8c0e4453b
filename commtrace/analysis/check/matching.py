"""Matching a collective across the members of its process group: the same (world, group, seq) on
every member (as PyTorch's Flight Recorder), what each member ran there (op, sizes, dtype, reduce op,
root) and how far each rank got in each group.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.schema import P2P_OPS
from ...trace.rank_ranges import folded_inline
from ...trace.group_ranks import parse_ranks
from .fates import process_worlds, run_worlds
from .findings import _int, _s

# Ops whose input sizes must agree across the group (Flight Recorder's SIZE check).
_SAME_INPUT_SHAPES = {"all_reduce", "broadcast", "reduce", "all_gather", "gather", "reduce_scatter"}
_SAME_OUTPUT_SHAPES = {"scatter"}
_HAS_REDUCE_OP = {"all_reduce", "reduce", "reduce_scatter"}
_HAS_ROOT = {"broadcast", "reduce", "gather", "scatter"}


def _op_desc(row) -> str:
    """all_reduce [[10]] float32 SUM"""
    root = _int(row.get("root"))
    parts = [str(row.get("op")), _s(row.get("shapes")), _s(row.get("dtype")), _s(row.get("reduce_op")),
             f"root={root}" if root is not None and str(row.get("op")) in _HAS_ROOT else None]
    return " ".join(p for p in parts if p)


# -- collectives -------------------------------------------------------------------

def is_p2p(op: pd.Series) -> np.ndarray:
    """Rows of the ``op`` column that are send/recv: by category code where it is categorical
    (as the reader builds it), so no string per row is made."""
    if isinstance(op.dtype, pd.CategoricalDtype):
        codes = [i for i, c in enumerate(op.cat.categories) if str(c) in P2P_OPS]
        return np.isin(op.cat.codes.to_numpy(), codes) if codes else np.zeros(len(op), bool)
    return op.astype(str).isin(P2P_OPS).to_numpy()


def collective_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` that are collectives (no point-to-point op)."""
    if len(df) == 0:
        return df
    return df[~is_p2p(df["op"])]


def _group_members(gdf: pd.DataFrame) -> list[int]:
    members = {r for text in gdf["group_ranks"].dropna().unique() for r in parse_ranks(text)}
    return sorted(members or {int(r) for r in gdf["rank"].unique()})


# The fields compared after the op: (category, column, value of a cell, the ops it applies to; None: all).
COMPARED_FIELDS = [("variant", "variant", _s, None), ("sizes", "shapes", _s, _SAME_INPUT_SHAPES),
                   ("sizes", "out_shapes", _s, _SAME_OUTPUT_SHAPES), ("dtype", "dtype", _s, None),
                   ("reduce_op", "reduce_op", _s, _HAS_REDUCE_OP), ("root", "root", _int, _HAS_ROOT)]


def _compare_at_seq(sdf: pd.DataFrame) -> list[tuple[str, dict]]:
    """Flight-Recorder-style mismatches among the ranks' rows at one seq: [(category, {value: [ranks]})]."""
    ranks = [int(r) for r in sdf["rank"]]

    def split(values) -> dict:
        groups: dict = {}
        for r, v in zip(ranks, values):
            groups.setdefault(v, []).append(r)
        return groups

    ops = sdf["op"].astype(str)
    by_op = split(ops)
    if len(by_op) > 1:
        return [("op", by_op)]  # other fields are meaningless across op types
    out = []
    for category, col, value, applies in COMPARED_FIELDS:
        if applies is None or ops.iloc[0] in applies:
            values = split([value(v) for v in sdf[col]])
            # a "mixed" or missing dtype (several tensors, none) agrees with any
            if len([k for k in values if category != "dtype" or k not in (None, "mixed")]) > 1:
                out.append((category, values))
    return out


def _fmt_split(split: dict) -> str:
    """{value: [ranks]} -> "[[16]] on rank 0-511; [[32]] on rank 512-1023" (by first rank, capped)."""
    value_of = {r: str(k) if k is not None else "-" for k, ranks in split.items() for r in ranks}
    return folded_inline(value_of, line=lambda rs, v: f"{v} on rank {rs}")


def _now_ns(run, t_max: int | None, world=None) -> int | None:
    """The latest moment the trace knows of (for in-flight ages): the processes' ends
    and ``t_max``, the latest start or end of any op (RunFacts.t_max). With ``world`` in a run of
    several worlds: that world's processes' ends (a later world's times say nothing of its waits),
    else ``t_max``."""
    cands = []
    several = len(run_worlds(run)) > 1
    for p in run.processes:
        if world is not None and several and world not in process_worlds(p):
            continue
        end = p.get("end")
        if isinstance(end, dict) and _int(end.get("t_mono_ns")) is not None:
            # on rank 0's clock, as the frame: plus the process's offset at its start (0: unknown, one host)
            clock = p.get("clock") if isinstance(p.get("clock"), dict) else {}
            aligned, start = _int(clock.get("start_aligned_ns")), _int(p.get("t_mono_ns"))
            offset = aligned - start if aligned is not None and start is not None else 0
            cands.append(_int(end["t_mono_ns"]) + offset)
    if t_max is not None and not (world is not None and several and cands):
        cands.append(t_max)
    return max(cands) if cands else None
