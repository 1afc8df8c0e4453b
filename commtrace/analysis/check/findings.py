"""What ``commtrace check`` reports: a ``Finding`` (kind, severity, what and where), the kinds and
severities, ``exit_code``, and the small formatting helpers every diagnosis shares.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from ..report import json_safe

ERROR, WARNING, INFO = "error", "warning", "info"
_SEV_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}

# Kinds of findings (stable strings: tests and JSON output use them).
NOT_ARRIVED = "not_arrived"        # some members entered a collective, others never did
MISMATCH = "mismatch"              # members disagree at the same seq (op, sizes, dtype, reduce op, root)
STUCK = "stuck"                    # every member entered, none/some never finished
FAILED = "failed"                  # the op raised on some ranks
EXCEPTION = "exception"            # the script raised on a rank
EXITED = "exited"                  # a rank exited with a non-zero code / by a signal
ABRUPT = "abrupt"                  # a rank's trace ends without an end record, or is truncated
MISSING_RANK = "missing_rank"      # a member rank wrote no trace at all
DAMAGED = "damaged"                # part of a trace file cannot be read (corrupt, cut, missing)
LOST_RECORD = "lost_record"        # a rank's record of a collective is unreadable (it did arrive: later ones exist)
NO_GROUP = "no_group"              # a process ended badly before it created any process group
STRAGGLER = "straggler"            # a rank is consistently the last to arrive
P2P_UNMATCHED = "p2p_unmatched"    # a send/recv without its counterpart
DUMP = "dump"                      # the watchdog or a signal wrote a state dump
PROGRESS = "progress"              # per group: last seq each rank completed
RECOVERED = "recovered"            # a torchrun restart's attempt ended well after earlier attempts failed
TRACE_ISSUE = "trace_issue"        # reader-level damage not covered above


@dataclass
class Finding:
    kind: str
    severity: str
    title: str                                     # one line, plain text
    details: list[str] = field(default_factory=list)
    world: str | None = None
    group: str | None = None
    seq: int | None = None
    op: str | None = None
    ranks: list[int] = field(default_factory=list)  # ranks this finding is about (e.g. never arrived)
    data: dict = field(default_factory=dict)        # machine-readable extras (JSON-safe)

    def to_dict(self) -> dict:
        return json_safe(asdict(self))


# Where an error stands in a chain of causes (check_order): how the culprit ended, a desync, a rank
# that raised outside communication; the hang they caused; consequences on the other ranks; then
# what processes without a rank (launchers) say their children did.
_CAUSE, _DESYNC, _HANG, _CONSEQUENCE, _LAUNCHER = range(5)


def root_cause_first(findings: list[Finding]) -> list[Finding]:
    """By severity and, among errors, root cause first (stable): a missing rank's exception, then the
    collective it left the others in, then their failed ops and exceptions, then the launcher's."""
    # (world, rank): a process finding names its world only when the run has several
    culprits = {(f.world, r) for f in findings if f.kind == NOT_ARRIVED for r in f.data.get("missing") or []}
    failed = {(f.world, r) for f in findings if f.kind == FAILED for r in f.ranks}

    def among(f: Finding, pairs: set) -> bool:
        if f.world is None:      # one world: its ranks
            return not {r for _, r in pairs}.isdisjoint(f.ranks)
        return any((f.world, r) in pairs for r in f.ranks)

    def place(f: Finding) -> int:
        if f.kind in (EXCEPTION, EXITED, ABRUPT, NO_GROUP) and not f.ranks:
            return _LAUNCHER
        if f.kind in (EXCEPTION, ABRUPT, MISSING_RANK) and among(f, culprits):
            return _CAUSE
        if f.kind == MISMATCH or (f.kind == EXCEPTION and not among(f, failed)):
            return _DESYNC
        if f.kind in (NOT_ARRIVED, STUCK, LOST_RECORD):
            return _HANG
        return _CONSEQUENCE

    return sorted(findings, key=lambda f: (_SEV_ORDER.get(f.severity, 3), place(f) if f.severity == ERROR else 0))


def exit_code(findings: list[Finding], strict: bool = False) -> int:
    """0 clean, 1 problems (errors; with ``strict`` also warnings)."""
    bad = {ERROR, WARNING} if strict else {ERROR}
    return 1 if any(f.severity in bad for f in findings) else 0


# -- helpers ---------------------------------------------------------------------

def _s(v) -> str | None:
    """A frame cell as text; None where missing (None, NA, NaN)."""
    return None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else str(v)


def _int(v) -> int | None:
    try:
        return None if _s(v) is None else int(v)
    except (TypeError, ValueError):
        return None


def _fmt_age(ns) -> str:
    if ns is None:
        return "?"
    s = ns / 1e9
    return f"{s:.1f} s" if s >= 1 else f"{ns / 1e6:.0f} ms"


def _group_label(world, group, desc=None, worlds: dict | None = None) -> str:
    """"group 0 (default_pg)"; with several ``worlds`` (id -> name: fates.world_names; a default
    group destroyed and made again, as in a test suite): "group 0 (default_pg) of world w3"."""
    g = f"group {group}"
    if desc and desc != group:
        g += f" ({desc})"
    if worlds and len(worlds) > 1:
        g += f" of world {worlds.get(world, world)}"
    return g
