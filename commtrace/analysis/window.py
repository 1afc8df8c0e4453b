"""The part of a run a report looks at: steps, a time range, phases (pure).

Per rank one interval [lo, hi] (``--steps A:B``: the begin of its step A to the end of its step B;
``--from/--to``: after the run's first op; both: the intersection) and optionally phases. An op is
in when it starts inside and its phase is asked for; a step when it lies wholly inside; times are
clipped to the interval.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import CommtraceError
from ..trace import step_range
from . import intervals as iv
from .arrays import OpArrays
from .timeline import parse_time

def parse_steps(text: str) -> tuple[int | None, int | None]:
    """``--steps`` as one range: '3:8' -> (3, 8); '3:' -> (3, None); ':8' -> (None, 8); '5' -> (5, 5);
    ``every:K`` (trace.step_range's bounded mode) is an error here."""
    try:
        rng = step_range.parse_steps(text)
    except ValueError as e:
        raise CommtraceError(f"--steps {e}") from None
    if rng.every:
        raise CommtraceError(f"--steps {text!r}: a report window is one range of steps (A:B, A:, :B or A); "
                             "every:K is for commtrace run (bounded mode)")
    return rng.first, rng.last


@dataclass(frozen=True)
class Window:
    steps: tuple[int | None, int | None] | None = None   # inclusive, None = open end
    t_from: int | None = None                             # ns after the run's first op
    t_to: int | None = None
    phases: tuple[str, ...] | None = None
    asked: str = field(default="", compare=False)        # the step options as given ("--steps 9:12"), for errors

    @classmethod
    def from_args(cls, steps: str | None = None, skip_steps: int | None = None, t_from: str | None = None,
                  t_to: str | None = None, phase: str | None = None) -> "Window":
        """From the command line's --steps, --skip-steps, --from, --to, --phase."""
        rng = parse_steps(steps) if steps else None
        if skip_steps is not None:
            if skip_steps < 0:
                raise CommtraceError(f"--skip-steps {skip_steps}: must be 0 or more")
            lo = skip_steps + 1
            if rng is not None:
                lo = max(lo, rng[0] or 1)
                if rng[1] is not None and rng[1] < lo:
                    raise CommtraceError(f"--skip-steps {skip_steps} leaves none of --steps {steps}")
            rng = (lo, rng[1] if rng else None)
        f = parse_time(t_from) if t_from else None
        t = parse_time(t_to) if t_to else None
        if f is not None and t is not None and t <= f:
            raise CommtraceError(f"--to {t_to} is not after --from {t_from}")
        phases = tuple(p.strip() for p in phase.split(",") if p.strip()) if phase else None
        asked = " ".join(f"{o} {v}" for o, v in (("--steps", steps), ("--skip-steps", skip_steps)) if v is not None)
        return cls(rng, f, t, phases or None, asked)

    @property
    def whole_run(self) -> bool:
        return self.steps is None and self.t_from is None and self.t_to is None and self.phases is None

    @property
    def has_range(self) -> bool:
        return self.steps is not None or self.t_from is not None or self.t_to is not None

    def describe(self, fmt_time=str) -> str:
        """One line for the banner: which part of the run is shown (``fmt_time``: ns -> text)."""
        if self.whole_run:
            return "whole run"
        parts = []
        if self.steps is not None:
            a, b = self.steps
            parts.append(f"steps {a or 1}..{b if b is not None else 'last'}")
        if self.t_from is not None or self.t_to is not None:
            parts.append(f"{fmt_time(self.t_from or 0)} .. {fmt_time(self.t_to) if self.t_to is not None else 'end'}"
                         " after the first op")
        if self.phases:
            parts.append("phase " + ", ".join(self.phases))
        return "; ".join(parts)


def check_steps(window: Window, first: int | None, last: int | None) -> None:
    """A step window must meet the run's steps ``first``..``last`` (``last`` None: none; ``first``
    None: unknown), else CommtraceError saying what the run has (not an empty "no communication")."""
    if window.steps is None:
        return
    asked = window.asked or "--steps"
    if last is None or last < 1:
        raise CommtraceError(f"{asked}: the run has no optimizer steps (steps are optimizer.step() calls; "
                             "--from/--to select by time)")
    a, b = window.steps
    if (a is not None and a > last) or (b is not None and first is not None and b < first):
        has = f"steps {first}..{last}" if first is not None else f"steps up to {last}"
        raise CommtraceError(f"{asked}: the run has {has}")


@dataclass
class Applied:
    """A window applied: which ops are in, and ``bounds``: rank -> (lo, hi) (None: the whole run)."""
    selected: np.ndarray
    bounds: dict[int, tuple[int, int]] | None
    steps_in: np.ndarray          # per row of the steps table: lies inside the window


def apply(window: Window, frame: pd.DataFrame, a: OpArrays, steps: pd.DataFrame, t0: int | None) -> Applied:
    n = len(a.rank)
    selected = np.ones(n, dtype=bool)
    steps_in = np.ones(len(steps), dtype=bool)
    bounds = None
    if window.has_range:
        bounds = {}
        ranks = np.union1d(np.unique(a.rank), steps["rank"].to_numpy(dtype=np.int64)).astype(np.int64)
        base = 0 if t0 is None else t0
        srank = steps["rank"].to_numpy()
        snum = steps["step"].to_numpy()
        sb = steps["t_begin_ns"].to_numpy(dtype=np.int64)
        se = steps["t_end_ns"].to_numpy(dtype=np.int64)
        for r in ranks.tolist():
            lo, hi = iv.NEG, iv.POS
            if window.steps is not None:
                a_, b_ = window.steps
                mine = (srank == r) & (snum >= (a_ or 1)) & (snum <= (b_ if b_ is not None else np.iinfo(np.int64).max))
                # (0, 0): the rank took none of these steps
                lo, hi = (int(sb[mine].min()), int(se[mine].max())) if mine.any() else (0, 0)
            if window.t_from is not None:
                lo = max(lo, base + window.t_from)
            if window.t_to is not None:
                hi = min(hi, base + window.t_to)
            bounds[int(r)] = (lo, max(lo, hi))
        lo_row, hi_row = np.array([bounds[int(r)] for r in ranks], dtype=np.int64).reshape(-1, 2).T
        ri = np.searchsorted(ranks, a.rank)
        selected &= (a.start >= lo_row[ri]) & (a.start <= hi_row[ri]) & (hi_row[ri] > lo_row[ri])
        if len(steps):
            si = np.searchsorted(ranks, srank)
            steps_in &= (sb >= lo_row[si]) & (se <= hi_row[si]) & (hi_row[si] > lo_row[si])
    if window.phases is not None and n:
        phase = frame["phase"].astype(object).fillna("-").to_numpy() if "phase" in frame else np.full(n, "-", object)
        selected &= np.isin(phase, list(window.phases))
    return Applied(selected, bounds, steps_in)


def in_bounds(rank: np.ndarray, t_begin: np.ndarray, t_end: np.ndarray, bounds: dict | None) -> np.ndarray:
    """Rows of a span/mark/region table that overlap their rank's interval."""
    if bounds is None:
        return np.ones(len(rank), dtype=bool)
    lo, hi = np.array([bounds.get(int(r), (0, 0)) for r in rank], dtype=np.int64).reshape(-1, 2).T
    return (t_end >= lo) & (t_begin <= hi) & (hi > lo)
