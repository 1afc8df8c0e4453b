"""``report --csv / --parquet`` of a run analysed by map/reduce, written rank by rank (one rank's
frame is the most ever in memory).

A rank's rows are the one-frame export's rows of that rank (``commtrace.load``'s columns and values;
in a window, its ops), in time order, rank after rank (the one-frame export interleaves ranks by
start). Parquet text columns are plain strings, not dictionary-coded as in the one-frame file: the
ranks' categories differ, and one file has one schema."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import CommtraceError
from . import export


def rank_frames(s):
    """The frame of each rank of Report ``s`` in rank order, cut to its window."""
    from ..analysis.partitioned import scan
    from ..analysis.partitioned.windowing import frame_in_window
    for part in scan(s.path):
        frame = part.load()
        yield frame_in_window(frame, s.bounds, s.window.phases if s.window is not None else None)


def write_by_rank(s, csv: str | None = None, parquet: str | None = None) -> None:
    for path in (csv, parquet):
        if path:
            export._check_writable(path)
    writer = None
    first = True
    try:
        for frame in rank_frames(s):
            if not len(frame) and not first:
                continue
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
