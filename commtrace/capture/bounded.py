"""Bounded, always-on tracing (``--keep-last N``, ``--steps A:B``): which records each flush
writes and what the rest counts (docs/trace-format.md, "Bounded mode"). An op belongs to the
step in progress at its call (the optimizer spans' step numbers, ``phases.StepCounter``).
All of it runs on the flush thread: the hot path is the same in every mode.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..trace import schema
from ..trace.step_range import StepRange, parse_steps

MAX_STEP_ENDS = 4096  # step ends kept to place ops in steps (older ops are flushed long since)


@dataclass(frozen=True)
class Options:
    keep_last: int | None = None
    steps: StepRange | None = None

    def describe(self) -> dict:
        """The header's ``bounded`` field."""
        return {"keep_last": self.keep_last, "steps": None if self.steps is None else str(self.steps)}

    def env(self) -> dict:
        """The environment variables that pass these options to child processes."""
        out = {}
        if self.keep_last:
            out[schema.ENV_KEEP_LAST] = str(self.keep_last)
        if self.steps is not None:
            out[schema.ENV_STEPS] = str(self.steps)
        return out


def parse_keep_last(value) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{value!r}: expected a number of ops (at least 1)")
    return n


def make_options(keep_last=None, steps=None, names=("keep_last", "steps")) -> Options | None:
    """Options from user values (None: full mode). ValueError names the bad one (``names``)."""
    try:
        n = None if keep_last in (None, "") else parse_keep_last(keep_last)
    except ValueError as e:
        raise ValueError(f"{names[0]} {e}") from None
    try:
        window = None if steps in (None, "") else (steps if isinstance(steps, StepRange) else parse_steps(steps))
    except ValueError as e:
        raise ValueError(f"{names[1]} {e}") from None
    return None if n is None and window is None else Options(n, window)


def options_from_env(env) -> Options | None:
    """The options ``commtrace run`` / ``commtrace.start()`` passed down (None: full mode)."""
    return make_options(env.get(schema.ENV_KEEP_LAST), env.get(schema.ENV_STEPS),
                        (f"{schema.ENV_KEEP_LAST}:", f"{schema.ENV_STEPS}:"))


class Coverage:
    """Per process: chooses the records each flush writes (steps window) and
    keeps the account of what the files cover. Used by the flush thread only."""

    def __init__(self, options: Options, sig_lines: list):
        self.options = options
        self.window = options.steps
        self._sig_lines = sig_lines         # the Recorder's list (grows; never copied)
        self._sig_op: list = []             # sig id -> op name (cached from sig_lines)
        self._sig_bytes: list = []
        self._ends_t: list = []             # monotonic ns of step ends, ascending ...
        self._ends_step: list = []          # ... and the step each one ended
        self._done_before = 0               # steps ended before the first kept end
        self._written_running: set = set()  # (t_call, group, seq, sig) written IN_FLIGHT outside the window
        self.ops_seen = 0                   # ops that finished (completed or failed)
        self.ops_written = 0                # of them, written in full
        self.running_written = 0            # IN_FLIGHT records written
        self.spans_seen = 0
        self.spans_written = 0
        self.steps_done = 0
        self.max_seq: dict = {}             # group id -> highest collective seq seen (written or counted)
        self.counts: dict = {}              # (group id, op) -> [ops, bytes, time_ns, time_unknown]
        self.changed = True

    def select(self, ops, spans):
        """(ops, spans) to write of this flush's packed records (either may be None)."""
        if spans is not None and len(spans):
            self._note_step_ends(spans)
            self.spans_seen += len(spans)
            if self.window is not None:
                spans = spans[self.window.contains(spans["step"].astype("int64"))]
            self.spans_written += len(spans)
            self.changed = True
        if ops is not None and len(ops):
            self._note_ops(ops)
            if self.window is not None:
                ops = self._select_ops(ops)
            final = ops["status"] != schema.STATUS_IN_FLIGHT
            n_final = int(final.sum())
            self.ops_written += n_final
            self.running_written += len(ops) - n_final
            self.changed = True
        return ops, spans

    def _note_step_ends(self, spans) -> None:
        import numpy as np
        opt = spans[spans["phase"] == schema.SPAN_PHASES.index("optimizer")]
        if not len(opt):
            return
        order = np.argsort(opt["t_end"], kind="stable")
        for t, step in zip(opt["t_end"][order].tolist(), opt["step"][order].tolist()):
            if step > self.steps_done:   # the first optimizer span of a step ends it
                self.steps_done = step
                self._ends_t.append(t)
                self._ends_step.append(step)
        if len(self._ends_t) > MAX_STEP_ENDS:
            cut = len(self._ends_t) - MAX_STEP_ENDS
            self._done_before = self._ends_step[cut - 1]
            del self._ends_t[:cut], self._ends_step[:cut]

    def step_at(self, t_call):
        """The step in progress at each call time (numpy int64 array)."""
        import numpy as np
        ends = np.asarray(self._ends_t, dtype=np.int64)
        done = np.asarray([self._done_before] + self._ends_step, dtype=np.int64)
        return done[np.searchsorted(ends, t_call, side="right")] + 1

    def _sig_info(self):
        """(op name, in-bytes) per sig id, read off the sig lines as they are added."""
        lines = self._sig_lines
        while len(self._sig_op) < len(lines):
            line = lines[len(self._sig_op)]
            self._sig_op.append(str(line.get("op")))
            b = line.get("bytes")
            self._sig_bytes.append(int(b) if isinstance(b, int) and not isinstance(b, bool) else 0)
        return self._sig_op, self._sig_bytes

    def _note_ops(self, ops) -> None:
        import numpy as np
        final = ops["status"] != schema.STATUS_IN_FLIGHT
        self.ops_seen += int(final.sum())
        op_names, _ = self._sig_info()
        uniq, inv = np.unique(ops["sig"], return_inverse=True)
        p2p = np.array([op_names[s] in schema.P2P_OPS if s < len(op_names) else True for s in uniq.tolist()],
                       dtype=bool)
        coll = ~p2p[inv]   # p2p seqs count per peer: no group-wide progress
        groups = ops["group"][coll]
        seqs = ops["seq"][coll]
        for g in np.unique(groups).tolist():
            m = int(seqs[groups == g].max())
            if m > self.max_seq.get(g, 0):
                self.max_seq[g] = m

    def _select_ops(self, ops):
        import numpy as np
        detail = self.window.contains(self.step_at(ops["t_call"]))
        status = ops["status"]
        running = status == schema.STATUS_IN_FLIGHT
        keep = detail | running | (status == schema.STATUS_FAILED)
        outside_running = running & ~detail
        for i in np.flatnonzero(outside_running).tolist():
            self._written_running.add(_key(ops[i]))
        if self._written_running:   # the final records of ops written running are written too
            cand = np.flatnonzero(~keep & np.isin(ops["t_call"], [k[0] for k in self._written_running]))
            for i in cand.tolist():
                k = _key(ops[i])
                if k in self._written_running:
                    keep[i] = True
                    self._written_running.discard(k)
        self._count(ops[~keep])
        return ops[keep]

    def _count(self, ops) -> None:
        import numpy as np
        if not len(ops):
            return
        op_names, op_bytes = self._sig_info()
        key = ops["group"].astype(np.int64) << 32 | ops["sig"].astype(np.int64)
        uniq, inv, n = np.unique(key, return_inverse=True, return_counts=True)
        d = ops["d_end"].astype(np.float64)
        known = ~np.isnan(d)
        t = np.bincount(inv, weights=np.where(known, d, 0.0), minlength=len(uniq))
        unknown = np.bincount(inv, weights=(~known).astype(np.float64), minlength=len(uniq))
        for k, cnt, tt, uu in zip(uniq.tolist(), n.tolist(), t.tolist(), unknown.tolist()):
            gid, sig = k >> 32, k & 0xFFFFFFFF
            op = op_names[sig] if sig < len(op_names) else "?"
            c = self.counts.setdefault((gid, op), [0, 0, 0, 0])
            c[0] += cnt
            c[1] += cnt * (op_bytes[sig] if sig < len(op_bytes) else 0)
            c[2] += int(tt)
            c[3] += int(uu)

    def state(self, writer) -> dict:
        """The content of ``<stem>.coverage.json`` (see trace/schema.py and docs/trace-format.md)."""
        self.changed = False
        return {
            **self.options.describe(),
            "t_mono_ns": time.monotonic_ns(),
            "ops_seen": self.ops_seen, "ops_written": self.ops_written, "running_written": self.running_written,
            "op_records_written": writer.records_written,
            "spans_seen": self.spans_seen, "spans_written": self.spans_written,
            "steps_done": self.steps_done,
            "max_seq": [[g, s] for g, s in sorted(self.max_seq.items())],
            "counts": [{"group": g, "op": op, "ops": c[0], "bytes": c[1], "time_ns": c[2], "time_unknown": c[3]}
                       for (g, op), c in sorted(self.counts.items())],
        }


class CallOrder:
    """Ring mode (``keep_last``): op records go to the file in call order.

    A flush sees ops as they finish, in no call order. The ring keeps the last records
    *written*; for it to keep the last ops *called*, each flush writes its records sorted
    by call time and holds back those called at or after ``before`` (the oldest op still
    running, see ``Recorder``) until a later flush."""

    def __init__(self):
        self._held = None   # records called after an op that was still running

    def release(self, ops, before: int | None):
        """``ops`` and those held before, called before ``before`` (None: all), by call time."""
        import numpy as np
        if self._held is not None:
            ops = self._held if ops is None else np.concatenate([self._held, ops])
            self._held = None
        if ops is None or not len(ops):
            return ops
        t = ops["t_call"]
        if not (t[1:] >= t[:-1]).all():   # usually sorted already: skip the copy
            ops = ops[np.argsort(t, kind="stable")]
        if before is None:
            return ops
        n = int(np.searchsorted(ops["t_call"], before, side="left"))
        if n < len(ops):
            self._held = ops[n:]
        return ops[:n]


def _key(rec) -> tuple:
    return (int(rec["t_call"]), int(rec["group"]), int(rec["seq"]), int(rec["sig"]))
