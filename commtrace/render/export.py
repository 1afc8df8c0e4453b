"""CSV / Parquet (one row per op per rank: the ``commtrace.load`` frame) and JSON (summary).

A run analysed by map/reduce is written rank by rank (``write_by_rank``: one rank's frame is the most
ever in memory): each rank's rows as the one-frame export's, in time order, rank after rank (the
one-frame export interleaves ranks by start). Its Parquet text columns are plain strings, not
dictionary-coded: the ranks' categories differ, and one file has one schema."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager

import numpy as np
import pandas as pd

from ..errors import CommtraceError
from ..trace.rank_ranges import WORLD_STRIDE


def _check_writable(path: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise CommtraceError(f"{path}: directory {d} does not exist")


@contextmanager
def _writing(path: str):
    """Writing ``path``: a missing directory or a failed write is a one-line CommtraceError."""
    _check_writable(path)
    try:
        yield
    except OSError as e:
        raise CommtraceError(f"{path}: cannot write ({e.strerror})") from None


def _as_written(frame: pd.DataFrame) -> pd.DataFrame:
    """The report's frame as ``commtrace.load`` has it: a rank of a later world (a rank key) as its rank
    (its ``world`` column says which world)."""
    if not len(frame) or int(frame["rank"].max()) < WORLD_STRIDE:
        return frame
    rank = frame["rank"].to_numpy()
    return frame.assign(rank=np.where(rank >= 0, rank % WORLD_STRIDE, rank).astype(rank.dtype))


def write_csv(frame: pd.DataFrame, path: str) -> None:
    with _writing(path):
        _as_written(frame).to_csv(path, index=False)


def write_parquet(frame: pd.DataFrame, path: str) -> None:
    with _writing(path):
        try:
            _as_written(frame).to_parquet(path, index=False)
        except ImportError:
            raise CommtraceError(f"{path}: Parquet export needs pyarrow (pip install pyarrow)") from None


def write_json(obj: dict, path: str) -> None:
    """Strict JSON (NaN becomes null upstream); '-' writes to stdout."""
    text = json.dumps(obj, indent=1, allow_nan=False, ensure_ascii=False, default=str)
    if path == "-":
        import sys
        sys.stdout.write(text + "\n")
        return
    with _writing(path), open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def rank_frames(s):
    """The frame of each rank of Report ``s`` in rank order, cut to its window."""
    from ..analysis.partitioned import scan
    from ..analysis.partitioned.windowing import frame_in_window
    for part in scan(s.path):
        frame = part.load(rank_keys=True)
        yield frame_in_window(frame, s.bounds, s.window.phases)


def write_by_rank(s, csv: str | None = None, parquet: str | None = None) -> None:
    for path in (csv, parquet):
        if path:
            _check_writable(path)
    writer = None
    first = True
    try:
        for frame in rank_frames(s):
            if not len(frame) and not first:
                continue
            frame = _as_written(frame)
            if csv:
                frame.to_csv(csv, index=False, mode="w" if first else "a", header=first)
            if parquet:
                writer = _write_parquet(writer, parquet, frame)
            first = False
    except OSError as e:
        raise CommtraceError(f"{csv or parquet}: cannot write ({e.strerror})") from None
    finally:
        if writer is not None:
            writer.close()


def _write_parquet(writer, path: str, frame: pd.DataFrame):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CommtraceError(f"{path}: Parquet export needs pyarrow (pip install pyarrow)") from None
    flat = frame.assign(**{c: _strings(frame[c]) for c in frame.columns
                           if isinstance(frame[c].dtype, pd.CategoricalDtype) or frame[c].dtype == object})
    table = pa.Table.from_pandas(flat, preserve_index=False)
    if writer is None:
        schema = pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in table.schema],
                           metadata=table.schema.metadata)   # pandas' dtypes (nullable ints) come back on read
        writer = pq.ParquetWriter(path, schema)
    writer.write_table(table.cast(writer.schema))
    return writer


def _strings(col: pd.Series) -> pd.Series:
    """A text column as str values (None where missing)."""
    values = col.astype(object).to_numpy()
    missing = pd.isna(values)
    out = np.where(missing, None, values.astype(str)) if len(values) else values
    return pd.Series(out, index=col.index, dtype=object)
