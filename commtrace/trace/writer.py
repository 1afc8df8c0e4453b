"""Append-only writer for one process's trace files (format in ``schema``; no torch here).
Meta lines go before the records of the same flush: a record never names an undefined sig.
"""
from __future__ import annotations

import json
import os
import threading

from . import schema, simhost


class RecordFile:
    """An append-only file of fixed-size records; with ``keep_last`` N a ring of two segments
    (at N records it becomes ``<path>.1``). One unbuffered write() per segment: what was
    written survives a SIGKILL."""

    def __init__(self, path: str, keep_last: int | None = None):
        self.path = path
        self.keep_last = keep_last
        self.f = None
        self.n = 0            # records in the current segment
        self.written = 0      # records ever written

    def open(self) -> None:
        if self.f is None:
            self.f = open(self.path, "ab", buffering=0)

    def write(self, records) -> None:
        self.open()
        self.written += len(records)
        if not self.keep_last:
            self.f.write(records.tobytes())
            return
        i = 0
        while i < len(records):
            if self.n >= self.keep_last:
                self._rotate()
            chunk = records[i:i + self.keep_last - self.n]
            self.f.write(chunk.tobytes())
            self.n += len(chunk)
            i += len(chunk)

    def _rotate(self) -> None:
        self.f.close()
        self.f = None
        os.replace(self.path, self.path + schema.PREVIOUS_SEGMENT)
        self.open()
        self.n = 0

    def paths(self, path: str | None = None) -> tuple[str, str]:
        path = self.path if path is None else path
        return path, path + schema.PREVIOUS_SEGMENT

    def rename(self, path: str) -> None:
        for old, new in zip(self.paths(), self.paths(path)):
            if os.path.exists(old):
                os.rename(old, new)
        self.path = path

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


class TraceWriter:
    """Writes ``<stem>.meta.jsonl``, ``.ops.bin`` and ``.spans.bin`` in ``run_dir``. The ops file
    is created by ``open_ops`` or the first records: a process with no group has none."""

    def __init__(self, run_dir: str, stem: str, keep_last: int | None = None):
        self.run_dir = run_dir
        self.stem = stem
        self.meta_path = os.path.join(run_dir, stem + schema.META_SUFFIX)
        os.makedirs(run_dir, exist_ok=True)
        # Unbuffered binary handles: each write() is one syscall, so whatever
        # was written survives a SIGKILL of this process (the page cache keeps it).
        self._meta = open(self.meta_path, "ab", buffering=0)
        self._ops = RecordFile(os.path.join(run_dir, stem + schema.OPS_SUFFIX), keep_last)
        self._spans = RecordFile(os.path.join(run_dir, stem + schema.SPANS_SUFFIX), keep_last)  # opened with the first span
        self._coverage = False   # a coverage file was written
        self._lock = threading.Lock()

    @property
    def ops_path(self) -> str:
        return self._ops.path

    @property
    def coverage_path(self) -> str:
        return os.path.join(self.run_dir, self.stem + schema.COVERAGE_SUFFIX)

    @property
    def records_written(self) -> int:
        return self._ops.written

    @property
    def spans_written(self) -> int:
        return self._spans.written

    def open_ops(self) -> None:
        with self._lock:
            if self._meta is not None:
                self._ops.open()

    def rename(self, stem: str) -> bool:
        """Give every file a new stem (they stay open). False, and nothing
        renamed, when a file of that name exists already."""
        with self._lock:
            new = {suffix: os.path.join(self.run_dir, stem + suffix)
                   for suffix in (schema.META_SUFFIX, schema.OPS_SUFFIX, schema.SPANS_SUFFIX, schema.COVERAGE_SUFFIX)}
            targets = [new[schema.META_SUFFIX], new[schema.COVERAGE_SUFFIX],
                       *self._ops.paths(new[schema.OPS_SUFFIX]), *self._spans.paths(new[schema.SPANS_SUFFIX])]
            if any(os.path.exists(p) for p in targets):
                return False
            os.rename(self.meta_path, new[schema.META_SUFFIX])
            if self._coverage:
                os.rename(self.coverage_path, new[schema.COVERAGE_SUFFIX])
            self._ops.rename(new[schema.OPS_SUFFIX])
            self._spans.rename(new[schema.SPANS_SUFFIX])
            self.stem, self.meta_path = stem, new[schema.META_SUFFIX]
            return True

    def write(self, meta_lines: list[dict], rows=None, spans=None) -> None:
        """Append meta lines, then op records (``schema.OP_RECORD``) and span records (``SPAN_RECORD``)."""
        meta_lines, rows, spans = simhost.apply(meta_lines, rows, spans)  # test-only; identity otherwise
        with self._lock:
            if self._meta is None:
                return
            if meta_lines:
                blob = "".join(json.dumps(m, separators=(",", ":"), default=str) + "\n" for m in meta_lines)
                self._meta.write(blob.encode("utf-8"))
            if rows is not None and len(rows):
                self._ops.write(rows)
            if spans is not None and len(spans):
                self._spans.write(spans)

    def append_after_close(self, meta_lines: list[dict]) -> None:
        """Append meta lines to the closed files' meta file (a process that ends otherwise than
        its end record said: ``Recorder.end_again``), and close it again."""
        with self._lock:
            if self._meta is None:
                self._meta = open(self.meta_path, "ab", buffering=0)
        self.write(meta_lines)
        self.close()

    def write_coverage(self, doc: dict) -> None:
        """Replace ``<stem>.coverage.json`` with ``doc`` (a new file renamed over the
        old one: a reader, or a SIGKILL, never sees half of it)."""
        with self._lock:
            if self._meta is None:
                return
            path = self.coverage_path
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"type": schema.COVERAGE_TYPE, **doc}, f, separators=(",", ":"), default=str)
            os.replace(tmp, path)
            self._coverage = True

    def close(self) -> None:
        with self._lock:
            if self._meta is not None:
                self._meta.close()
            self._ops.close()
            self._spans.close()
            self._meta = None


def pack_rows(rows: list[list]):
    """Recorder rows ``[t_call, t_return, t_end, seq, sig, iteration, group, status, flags]``
    (absolute monotonic ns; t_return / t_end 0 when unknown) as ``OP_RECORD``s."""
    import numpy as np
    a = np.array(rows, dtype=np.int64).reshape(len(rows), 9)
    out = np.empty(len(rows), dtype=schema.OP_RECORD)
    out["t_call"] = a[:, 0]
    for f, col in (("d_return", 1), ("d_end", 2)):
        d = (a[:, col] - a[:, 0]).astype(np.float32)
        d[a[:, col] == 0] = np.nan
        out[f] = d
    for f, col in (("seq", 3), ("sig", 4), ("iteration", 5), ("group", 6), ("status", 7)):
        out[f] = a[:, col]
    out["flags"] = a[:, 8] & 0xFF  # higher bits are the recorder's private marks
    return out


def pack_spans(spans: list[tuple]):
    """Recorder spans (phase index, t_begin, t_end, step, iteration, label id, flags) as ``SPAN_RECORD``s."""
    import numpy as np
    a = np.array(spans, dtype=np.int64).reshape(len(spans), 7)
    out = np.zeros(len(spans), dtype=schema.SPAN_RECORD)
    for i, name in enumerate(("phase", "t_begin", "t_end", "step", "iteration", "label", "flags")):
        out[name] = a[:, i]
    return out
