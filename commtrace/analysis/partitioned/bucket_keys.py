"""--by bucket / params in the cells: each op's DDP bucket and parameters as the frame has them
(trace.annotations: process_buckets, assign_buckets).

A gradient all_reduce's bucket is numbered over its whole process (the nth of its (module, iteration) in
call order), so the rank task, which reads whole files, numbers them and hands each partition task a
small table per file (``BucketRuns``: (group id, seq) -> bucket as runs over which bucket - seq is
constant: DDP, about one run per step). Its parameters follow from its bucket, module and iteration (the
process's DDP layouts), so both tasks derive them alike (``ProcessNotes``), by the frame's rule
(annotations.layout_params, buffers_params). Whether buckets are numbered at all (the run has phases) and
params come from the layouts (the run has DDP layouts) is the run's (annotations.bucket_rule, the plan's)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...trace import reader
from ...trace.annotations import (BucketRule, buffers_params, ddp_layouts, layout_params, layout_table,
                                  process_buckets, sig_is_gradient_allreduce)
from ..arrays import NA_KEY

NOTE_KEYS = ("bucket", "params")


@dataclass
class BucketRuns:
    """One file's gradient all_reduces' buckets: from ``starts[i]`` (group id << 32 | seq) on, bucket = seq +
    ``deltas[i]``."""
    starts: np.ndarray
    deltas: np.ndarray

    @classmethod
    def of(cls, group: np.ndarray, seq: np.ndarray, bucket: np.ndarray) -> BucketRuns:
        key = (group.astype(np.int64) << 32) | seq.astype(np.int64)
        order = np.argsort(key, kind="stable")
        key, delta = key[order], bucket.astype(np.int64)[order] - seq.astype(np.int64)[order]
        new = np.ones(len(key), bool)
        new[1:] = (delta[1:] != delta[:-1]) | ((key[1:] >> 32) != (key[:-1] >> 32))
        return cls(key[new], delta[new])

    def within(self, lo: int, hi: int) -> BucketRuns:
        """The runs seqs in [lo, hi) of any group fall in (a partition task's chunk: what it looks up)."""
        group, seq = self.starts >> 32, self.starts & 0xFFFFFFFF
        same = np.zeros(len(seq), bool)
        same[:-1] = group[1:] == group[:-1]
        end = np.full(len(seq), np.iinfo(np.int64).max)      # a group's last run: to its last seq
        end[:-1][same[:-1]] = seq[1:][same[:-1]]
        keep = (seq < hi) & (end > lo)
        return BucketRuns(self.starts[keep], self.deltas[keep])

    def buckets(self, group: np.ndarray, seq: np.ndarray) -> np.ndarray:
        key = (group.astype(np.int64) << 32) | seq.astype(np.int64)
        at = np.maximum(np.searchsorted(self.starts, key, side="right") - 1, 0)
        return seq.astype(np.int64) + self.deltas[at] if len(self.starts) else np.full(len(key), -1, np.int64)


class ProcessNotes:
    """The (bucket, params) text of each record of one process (the frame's), as codes into ``texts``:
    per sig for most (``base``), per record for gradient all_reduces (``grad``) once their buckets are
    known (``codes``)."""

    def __init__(self, pt, rule: BucketRule):
        sigs = [pt.sigs[i] for i in sorted(pt.sigs)]
        self.index, self.texts, self.params = {}, [], {}     # params: parameter list text -> its code
        layouts, buffers = ddp_layouts(pt.ddp) if rule.layouts else ({}, {})
        self.grad = np.array([rule.phased and sig_is_gradient_allreduce(s) for s in sigs], bool)
        modules = [reader.str_or_none(s.get("module")) for s in sigs]
        base = []
        for s, m in zip(sigs, modules):
            own = reader.str_or_none(s.get("params"))
            if not rule.phased:
                base.append((small_int_text(s.get("bucket")), NA_KEY if own is None else own))
            elif rule.layouts:
                names = buffers_params(buffers, m, reader.str_or_none(s.get("detail")))
                base.append((NA_KEY, NA_KEY if names is None else names))
            else:
                base.append((NA_KEY, NA_KEY if own is None else own))
        self.base = np.array([self._code(b) for b in base], np.int64)
        # a gradient all_reduce's params: without layouts its sig's (the code of base's text), else the layout's
        # in force at its iteration (per module: the iterations layouts start at, and a (layout, bucket) table)
        self.own = np.array([self._param(b[1]) for b in base], np.int64)
        self.module = np.array([-1 if m not in layouts else sorted(layouts).index(m) for m in modules], np.int64)
        self.layouts = [layout_table(layouts[m], self._param) for m in sorted(layouts)]
        self.by_layout = rule.layouts

    def _code(self, note: tuple) -> int:
        code = self.index.get(note)
        if code is None:
            code = self.index[note] = len(self.texts)
            self.texts.append(note)
        return code

    def _param(self, text: str) -> int:
        return -1 if text == NA_KEY else self.params.setdefault(text, len(self.params))

    def codes(self, si: np.ndarray, iteration: np.ndarray, bucket: np.ndarray | None) -> np.ndarray:
        """Per record (sig indexes ``si``, its iteration) its code; ``bucket``: per record its bucket, read
        where a gradient all_reduce's."""
        out = self.base.take(si)
        g = np.flatnonzero(self.grad.take(si))
        if len(g):
            out[g] = self.grad_codes(si[g], iteration[g], bucket[g])
        return out

    def grad_codes(self, si: np.ndarray, iteration: np.ndarray, bucket: np.ndarray) -> np.ndarray:
        """Codes of gradient all_reduces of sig indexes ``si``, iterations and buckets (process_buckets)."""
        b = bucket.astype(np.int64)
        p = self.own.take(si) if not self.by_layout else np.full(len(si), -1, np.int64)
        mod = self.module.take(si) if self.by_layout else np.full(len(si), -1, np.int64)
        for m in np.unique(mod[mod >= 0]).tolist():
            sel = np.flatnonzero(mod == m)
            p[sel] = layout_params(self.layouts[m], iteration[sel], b[sel])
        k = len(self.params) + 1        # (bucket, params code + 1) as one int64: a 1-d unique, not unique(axis=0)
        pairs, of = np.unique(b * k + (p + 1), return_inverse=True)
        names = [NA_KEY] + list(self.params)
        codes = [self._code((str(x // k), names[x % k])) for x in pairs.tolist()]
        return np.array(codes, np.int64)[of.reshape(-1)]


class Numbering:
    """The gradient all_reduces of one process's records, read a piece at a time (``add``), numbered
    (``done``: their positions, ProcessNotes codes and BucketRuns)."""

    def __init__(self, pt, notes: ProcessNotes, slut: np.ndarray):
        self.pt, self.notes, self.slut, self.parts = pt, notes, slut, []

    def add(self, rec: np.ndarray, si: np.ndarray, lo: int) -> None:
        g = np.flatnonzero(self.notes.grad.take(si))
        self.parts.append((g + lo, rec[g]))

    def done(self) -> tuple[np.ndarray, np.ndarray, BucketRuns]:
        none = np.empty(0, np.int64)
        if not self.parts:
            return none, none, BucketRuns(none, none)
        pos, rec = np.concatenate([p for p, _ in self.parts]), np.concatenate([r for _, r in self.parts])
        self.parts = []
        b = process_buckets(rec["t_call"], rec["sig"], rec["iteration"], self.pt.sigs).astype(np.int64)
        codes = self.notes.grad_codes(self.slut.take(rec["sig"]), rec["iteration"], b) if len(rec) else none
        return pos, codes, BucketRuns.of(rec["group"], rec["seq"], b)


def small_int_text(v) -> str:
    """A sig's bucket, tag or root as the frame's Int32 column has it: NA_KEY when none, 0 when too big."""
    x = reader.num_or_nan(v)
    return NA_KEY if np.isnan(x) else str(int(x) if abs(x) < 2**31 else 0)
