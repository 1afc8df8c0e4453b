"""C++-layer trace files (the ProcessGroupMPI patch; trace.layers) in the partitioned analysis.

The reader folds each C++ row into the Python row of the same op (``layers.merge_cpp_layer``);
C++ rows no Python row matched (e.g. subgroup ops only the patched backend saw) stay, timed on
their Python twin's clock. The merge is per process, so a rank task with C++ files takes its
figures from its merged frame (``frame_ops``); partition tasks read the C++ files' records but keep
only the unmatched ones (``CppFile``: their (group id, seq) keys and the twin whose clock they use)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace import reader, records, schema
from ...trace.annotations import BucketRule
from ...trace.rank_ranges import world_group_name
from ..arrays import NA_KEY, OpArrays
from ..modules import module_keys
from .bucket_keys import NOTE_KEYS, BucketRuns
from .rank_ops import CELL_COLUMNS, RankOps, rank_ops


@dataclass
class CppFile:
    twin_meta: str              # the Python-layer file of the same process (its clock times the C++ records)
    unmatched: np.ndarray       # sorted group id << 32 | seq of the records no Python row matched


def has_cpp(procs: list) -> bool:
    return any(p.header.get("source") == "cpp" for p in procs)


def rank_ops_of(procs: list, refs: dict, rank: int, lean: int = 0, worlds: dict | None = None,
                extra: tuple = (), rule: BucketRule = BucketRule()) -> tuple[RankOps | None, dict]:
    """(a rank's ops, {C++ ops path: CppFile}) of ``procs`` with their records: gathered from the
    records (rank_ops), or from the rank's frame after the C++ merge (build_frame consumes them;
    the merge reads the clock descriptions). ``extra``, ``rule``: rank_ops'."""
    cpp = [p for p in procs if p.header.get("source") == "cpp"]
    if not cpp:
        return rank_ops(procs, refs, rank, lean, worlds, extra, rule), {}
    reader.describe_clocks(procs, refs)
    twins = {p.stem: reader.python_twin(p, procs) for p in cpp}
    groups = {p.stem: {reader.str_or_none(g.get("name")): gid for gid, g in p.groups.items()} for p in cpp}
    frame = rank_frame(procs, refs)
    left = frame[(frame["source"] == "cpp").to_numpy()] if len(frame) else frame
    files = {}
    for p in cpp:
        mine = left[(left["file"] == p.stem).to_numpy()] if len(left) else left
        gid = np.array([groups[p.stem].get(g, -1) for g in mine["group"].astype(object)], np.int64)
        keys = np.sort((gid << 32) | mine["seq"].to_numpy(np.int64)) if len(mine) else np.empty(0, np.int64)
        files[p.ops_path] = CppFile(twins[p.stem].meta_path, keys)
    ops = frame_ops(frame, worlds, extra)
    if ops is not None and set(NOTE_KEYS) & set(extra):
        ops.bucket_runs = frame_bucket_runs(frame, procs)
    return ops, files


def frame_bucket_runs(frame: pd.DataFrame, procs: list) -> dict:
    """{ops path: BucketRuns} of each process's rows of ``frame`` with a bucket (the partitions read those of
    gradient all_reduces; they also number the unmatched C++ rows, numbered over their C++ file)."""
    out = {}
    for p in procs:
        rows = frame[(frame["file"] == p.stem).to_numpy() & frame["bucket"].notna().to_numpy()]
        gid = {reader.str_or_none(g.get("name")): i for i, g in p.groups.items()}
        group = np.array([gid.get(g, -1) for g in rows["group"].astype(object)], np.int64)
        out[p.ops_path] = BucketRuns.of(group, rows["seq"].to_numpy(np.int64), rows["bucket"].to_numpy(np.int64))
    return out


def rank_frame(procs: list, refs: dict, world_ranks: bool = False) -> pd.DataFrame:
    """Some ranks' frame as ``reader.load_run`` has their ops: C++ rows merged into Python rows
    (``world_ranks``: reader.build_frame)."""
    frame = reader.merged_frame(procs, refs, world_ranks)
    return frame.reset_index(drop=True) if has_cpp(procs) else frame


def frame_ops(frame: pd.DataFrame, worlds: dict | None = None, extra: tuple = ()) -> RankOps | None:
    """RankOps of one rank's (merged) frame: the same arrays rank_ops gathers from records (``worlds``:
    rank_ops.cell_key's; ``extra``: rank_ops')."""
    if not len(frame):
        return None
    keys = pd.DataFrame({c: frame[c].astype(object).where(frame[c].notna(), NA_KEY).astype(str)
                         for c in CELL_COLUMNS + tuple(extra)})
    if worlds:
        keys["group"] = [world_group_name(g, worlds.get(w))
                         for g, w in zip(keys["group"], frame["world"].astype(object))]
    cell, uniq = pd.MultiIndex.from_frame(keys).factorize()
    ops = frame["op"]
    op_names = [str(o) for o in (ops.cat.categories if isinstance(ops.dtype, pd.CategoricalDtype)
                                 else pd.unique(ops.dropna()))]
    proc, stems = pd.factorize(frame["file"].astype(str))
    status_of = {name: code for code, name in schema.STATUS_NAMES.items()}
    status = np.array([status_of[s] for s in frame["status"].astype(str)], np.uint8)
    mkey, mkeys = module_keys(frame)
    return RankOps(OpArrays.of(frame), frame, cell.astype(np.int64), [tuple(t) for t in uniq], op_names,
                   proc.astype(np.int32), list(stems), status, mkey, mkeys)


def cpp_unmatched(got: tuple, f: CppFile, refs: dict, process) -> tuple | None:
    """A partition's slice of a C++ file (pt, records, times): its unmatched records, timed on the
    Python twin's clock (as build_frame times them); ``process``: meta path -> ProcessTrace."""
    pt, rec, _ = got
    keep = np.isin((rec["group"].astype(np.int64) << 32) | rec["seq"].astype(np.int64), f.unmatched)
    if not keep.any():
        return None
    rec = rec[keep]
    twin = process(f.twin_meta) or pt
    ref_meta = refs.get(twin.world_id)
    ref = process(ref_meta) if ref_meta else None
    return pt, rec, records.call_times(twin, ref, rec)
