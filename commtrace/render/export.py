"""CSV / Parquet (one row per op per rank: the ``commtrace.load`` frame) and JSON (summary)."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager

import pandas as pd

from ..errors import CommtraceError


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


def write_csv(frame: pd.DataFrame, path: str) -> None:
    with _writing(path):
        frame.to_csv(path, index=False)


def write_parquet(frame: pd.DataFrame, path: str) -> None:
    with _writing(path):
        try:
            frame.to_parquet(path, index=False)
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
