"""Append-only writer for one process's trace files (format in ``schema``).

The writer knows nothing about torch: it takes JSON-able dicts for the meta
file and packed record rows for the ops file. Meta lines are always written
before the records of the same flush, so a record never refers to a sig or
group the file does not define yet.
"""
from __future__ import annotations

import json
import os
import threading

from . import schema, simhost


class TraceWriter:
    """Writes ``<stem>.meta.jsonl`` and ``<stem>.ops.bin`` in ``run_dir``.

    The ops file is created with ``open_ops`` (or the first records): a
    process that never creates a process group has only a meta file.
    """

    def __init__(self, run_dir: str, stem: str):
        self.run_dir = run_dir
        self.stem = stem
        self.meta_path = os.path.join(run_dir, stem + schema.META_SUFFIX)
        self.ops_path = os.path.join(run_dir, stem + schema.OPS_SUFFIX)
        self.spans_path = os.path.join(run_dir, stem + schema.SPANS_SUFFIX)
        os.makedirs(run_dir, exist_ok=True)
        # Unbuffered binary handles: each write() is one syscall, so whatever
        # was written survives a SIGKILL of this process (the page cache keeps it).
        self._meta = open(self.meta_path, "ab", buffering=0)
        self._ops = None
        self._spans = None   # opened with the first compute span
        self._lock = threading.Lock()
        self.records_written = 0

    def open_ops(self) -> None:
        with self._lock:
            if self._ops is None and self._meta is not None:
                self._ops = open(self.ops_path, "ab", buffering=0)

    def rename(self, stem: str) -> bool:
        """Give every file a new stem (they stay open). False, and nothing
        renamed, when a file of that name exists already."""
        with self._lock:
            paths = [os.path.join(self.run_dir, stem + suffix)
                     for suffix in (schema.META_SUFFIX, schema.OPS_SUFFIX, schema.SPANS_SUFFIX)]
            if any(os.path.exists(p) for p in paths):
                return False
            for old, new, f in zip((self.meta_path, self.ops_path, self.spans_path), paths,
                                   (self._meta, self._ops, self._spans)):
                if f is not None:
                    os.rename(old, new)
            self.stem, (self.meta_path, self.ops_path, self.spans_path) = stem, paths
            return True

    def write(self, meta_lines: list[dict], rows=None, spans=None) -> None:
        """Append meta lines, then op records (a numpy array of ``schema.OP_RECORD``)
        and compute span records (``schema.SPAN_RECORD``)."""
        meta_lines, rows, spans = simhost.apply(meta_lines, rows, spans)  # test-only; identity otherwise
        if rows is not None and len(rows) and self._ops is None:
            self.open_ops()
        with self._lock:
            if self._meta is None:
                return
            if meta_lines:
                blob = "".join(json.dumps(m, separators=(",", ":"), default=str) + "\n" for m in meta_lines)
                self._meta.write(blob.encode("utf-8"))
            if rows is not None and len(rows):
                self._ops.write(rows.tobytes())
                self.records_written += len(rows)
            if spans is not None and len(spans):
                if self._spans is None:
                    self._spans = open(self.spans_path, "ab", buffering=0)
                self._spans.write(spans.tobytes())

    def close(self) -> None:
        with self._lock:
            for f in (self._meta, self._ops, self._spans):
                if f is not None:
                    f.close()
            self._meta = self._ops = self._spans = None


def pack_rows(rows: list[list]):
    """Pack recorder rows into a numpy array of ``OP_RECORD``.

    A row is ``[t_call, t_return, t_end, seq, sig, iteration, group, status, flags]``
    with absolute monotonic ns; ``t_return``/``t_end`` are 0 when unknown.
    """
    import numpy as np
    a = np.array(rows, dtype=np.int64).reshape(len(rows), 9)
    out = np.empty(len(rows), dtype=schema.OP_RECORD)
    t_call = a[:, 0]
    out["t_call"] = t_call
    d_return = (a[:, 1] - t_call).astype(np.float32)
    d_return[a[:, 1] == 0] = np.nan
    out["d_return"] = d_return
    d_end = (a[:, 2] - t_call).astype(np.float32)
    d_end[a[:, 2] == 0] = np.nan
    out["d_end"] = d_end
    out["seq"] = a[:, 3]
    out["sig"] = a[:, 4]
    out["iteration"] = a[:, 5]
    out["group"] = a[:, 6]
    out["status"] = a[:, 7]
    out["flags"] = a[:, 8] & 0xFF  # higher bits are the recorder's private marks
    return out


def pack_spans(spans: list[tuple]):
    """Pack recorder spans (phase index, t_begin, t_end, step, iteration, label id, flags)
    into a numpy array of ``SPAN_RECORD``."""
    import numpy as np
    a = np.array(spans, dtype=np.int64).reshape(len(spans), 7)
    out = np.zeros(len(spans), dtype=schema.SPAN_RECORD)
    for i, name in enumerate(("phase", "t_begin", "t_end", "step", "iteration", "label", "flags")):
        out[name] = a[:, i]
    return out
