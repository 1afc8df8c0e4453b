"""Test-only: make this process look as if it ran on another host (CI has one machine).

``COMMTRACE_TEST_CLOCK_SHIFT_NS`` is added to every CLOCK_MONOTONIC time the process
writes (op and span records, the ``MONO_FIELDS`` of its meta lines) and sends in clock
ping-pong, as a clock on another host would differ; ``COMMTRACE_TEST_HOST`` is the host
name its headers give. Read once per process (children inherit them) and applied when
the trace is written, so the recording hot path pays nothing. Not for production use.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from . import schema

SHIFT_ENV = "COMMTRACE_TEST_CLOCK_SHIFT_NS"
HOST_ENV = "COMMTRACE_TEST_HOST"

# Meta-line fields that hold this process's CLOCK_MONOTONIC ns (wall-clock
# fields, offsets and durations are not shifted).
MONO_FIELDS = ("t_mono_ns", "t_mono_open_ns", "t_begin_ns", "t_end_ns", "t_call")


@dataclass(frozen=True)
class SimulatedHost:
    shift_ns: int
    host: str | None

    def meta(self, lines: list[dict]) -> list[dict]:
        return [self._line(m) for m in lines]

    def _line(self, m: dict) -> dict:
        fields = [k for k in MONO_FIELDS if schema.int_or_none(m.get(k)) is not None]
        rename = self.host is not None and m.get("type") == schema.META_HEADER
        if not fields and not rename:
            return m
        out = dict(m)  # the recorder keeps its lines (re-stated in a forked child's file)
        for k in fields:
            out[k] += self.shift_ns
        if rename:
            out["host"] = self.host
        return out

    def records(self, records, fields=("t_call",)):
        """Op records (numpy ``OP_RECORD``; span records: ``fields`` t_begin, t_end) with ``fields``
        shifted (a copy)."""
        if records is None or not len(records) or not self.shift_ns:
            return records
        records = records.copy()
        for f in fields:
            records[f] += self.shift_ns
        return records


_UNSET = object()
_current = _UNSET


def current() -> SimulatedHost | None:
    """The simulated host of this process, or None (the normal case)."""
    global _current
    if _current is _UNSET:
        _current = _from_env(os.environ)
    return _current


def reset() -> None:
    """Forget the cached simulation: the next use reads the environment again
    (for tests and benchmarks that simulate hosts in forked processes)."""
    global _current
    _current = _UNSET


def shift_ns() -> int:
    sim = current()
    return sim.shift_ns if sim is not None else 0


def _from_env(env) -> SimulatedHost | None:
    raw, host = env.get(SHIFT_ENV), env.get(HOST_ENV) or None
    shift = 0
    if raw:
        try:
            shift = int(raw)
        except ValueError:
            sys.stderr.write(f"commtrace: {SHIFT_ENV}={raw!r} is not an integer; ignored\n")
    if not shift and host is None:
        return None
    return SimulatedHost(shift, host)


def apply(meta_lines: list[dict], rows, spans=None):
    """(meta lines, op records, span records) as this process writes them: unchanged unless simulated."""
    sim = current()
    if sim is None:
        return meta_lines, rows, spans
    return sim.meta(meta_lines), sim.records(rows), sim.records(spans, ("t_begin", "t_end"))
