"""CSV / Parquet (one row per op per rank: the ``commtrace.load`` frame) and JSON (summary)."""
from __future__ import annotations

import json
import os

import pandas as pd

from ..errors import CommtraceError


def _check_writable(path: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise CommtraceError(f"{path}: directory {d} does not exist")


def write_csv(frame: pd.DataFrame, path: str) -> None:
    _check_writable(path)
    try:
        frame.to_csv(path, index=False)
    except OSError as e:
        raise CommtraceError(f"{path}: cannot write ({e.strerror})") from None


def write_parquet(frame: pd.DataFrame, path: str) -> None:
    _check_writable(path)
    try:
        frame.to_parquet(path, index=False)
    except ImportError:
        raise CommtraceError(f"{path}: Parquet export needs pyarrow (pip install pyarrow)") from None
    except OSError as e:
        raise CommtraceError(f"{path}: cannot write ({e.strerror})") from None


def write_json(obj: dict, path: str) -> None:
    """Strict JSON (NaN becomes null upstream); '-' writes to stdout."""
    text = json.dumps(obj, indent=1, allow_nan=False, ensure_ascii=False, default=str)
    if path == "-":
        import sys
        sys.stdout.write(text + "\n")
        return
    _check_writable(path)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as e:
        raise CommtraceError(f"{path}: cannot write ({e.strerror})") from None
