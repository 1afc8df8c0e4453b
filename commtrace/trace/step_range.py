"""The one syntax of a window of optimizer steps, for ``--steps`` of ``run`` (also
``COMMTRACE_STEPS``, ``commtrace.start(steps=)``), ``report`` and ``compare`` (in trace/,
which capture and analysis both import; docs/report.md, "Windows"): ``A:B`` inclusive,
``A``, ``A:``, ``:B``, and ``every:K`` (steps K, 2K, ...; ``run`` only). Steps count from 1.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_RANGE_RE = re.compile(r"^\s*(\d*)\s*(:?)\s*(\d*)\s*$")
_EVERY_RE = re.compile(r"^\s*every\s*:\s*(\d+)\s*$")
SYNTAX = "A:B, A:, :B, A (steps count from 1) or every:K"


@dataclass(frozen=True)
class StepRange:
    """Optimizer steps ``first..last`` (inclusive; None: open end), or every ``every``-th step."""
    first: int | None = None
    last: int | None = None
    every: int = 0

    def contains(self, steps):
        """Boolean array: which of ``steps`` (numpy ints) are in the window."""
        if self.every:
            return (steps % self.every) == 0
        ok = steps >= (self.first or 1)
        return ok if self.last is None else ok & (steps <= self.last)

    def __str__(self) -> str:
        """The text ``parse_steps`` reads back (as the trace header's ``bounded.steps`` keeps it)."""
        if self.every:
            return f"every:{self.every}"
        return f"{'' if self.first is None else self.first}:{'' if self.last is None else self.last}"


def parse_steps(text) -> StepRange:
    """``"3:8"``, ``"3"``, ``"3:"``, ``":8"`` or ``"every:4"``; ValueError (the text and
    what is wrong, no option name: the caller names its option) otherwise."""
    text = str(text)
    m = _EVERY_RE.match(text)
    if m:
        k = int(m.group(1))
        if k < 1:
            raise ValueError(f"{text!r}: K must be at least 1 (every:K means steps K, 2K, 3K, ...)")
        return StepRange(every=k)
    m = _RANGE_RE.match(text)
    if not m or not (m.group(1) or m.group(3)):
        raise ValueError(f"{text!r}: expected {SYNTAX}")
    a = int(m.group(1)) if m.group(1) else None
    b = int(m.group(3)) if m.group(3) else None
    if not m.group(2):
        b = a
    if (a is not None and a < 1) or (b is not None and b < 1) or (a is not None and b is not None and b < a):
        raise ValueError(f"{text!r}: steps count from 1 and A:B needs A <= B")
    return StepRange(a, b)
