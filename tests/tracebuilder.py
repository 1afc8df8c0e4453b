"""Hand-made traces for analysis tests: real trace files, written with the real writer.

    p0, p1 = Proc(0), Proc(1)
    p0.span("forward", 0, 10, step=1); p0.op("all_reduce", 12, 30, phase="backward", module="Net")
    run_dir = write_run(tmp_path, [p0, p1])

Times are given in microseconds from a common origin (every rank on one host,
so the reader applies no clock offset); the files hold nanoseconds.
"""
from __future__ import annotations

import os

import numpy as np

from commtrace.trace import schema
from commtrace.trace.writer import TraceWriter, pack_spans

T0 = 1_000_000_000_000   # ns: the origin of the microsecond times below
US = 1_000


def ns(us: float) -> int:
    return T0 + int(round(us * US))


class Proc:
    """One traced process (one rank)."""

    def __init__(self, rank: int, world_size: int = 2, host: str = "h0", pid: int | None = None,
                 group_name: str = "0", group_desc: str = "default_pg", world_id: str = "w0"):
        self.rank, self.world_size, self.host, self.world_id = rank, world_size, host, world_id
        self.group_name, self.group_desc = group_name, group_desc
        self.pid = pid if pid is not None else 4000 + rank
        self.sigs: dict[tuple, int] = {}
        self.sig_lines: list[dict] = []
        self.records: list[tuple] = []
        self.meta: list[dict] = []
        self.seq: dict[int, int] = {}
        self.spans: list[tuple] = []
        self.labels: dict[str, int] = {}

    def _sig(self, desc: dict) -> int:
        key = tuple(sorted((k, str(v)) for k, v in desc.items()))
        if key not in self.sigs:
            self.sigs[key] = len(self.sig_lines)
            self.sig_lines.append({"type": schema.META_SIG, "id": self.sigs[key], **desc})
        return self.sigs[key]

    def op(self, op: str, start: float, end: float | None, *, ret: float | None = None, nbytes: int = 4,
           seq: int | None = None, group: int = 0, is_async: bool = True, status: int = schema.STATUS_COMPLETED,
           iteration: int = 0, root: int | None = None, **annotations) -> "Proc":
        """An op from ``start`` to ``end`` (µs; None = never completed), returning to
        the caller at ``ret`` (default: ``end`` for blocking ops, ``start`` for async ones)."""
        n = max(nbytes // 4, 1)
        desc = {"op": op, "variant": op.replace("_", ""), "shapes": [[n]], "out_shapes": [[n]], "dtype": "float32",
                "bytes": nbytes, "out_bytes": nbytes, "device": "cpu", "root": root, "async": is_async,
                "thread": "MainThread", **{k: v for k, v in annotations.items() if v is not None}}
        if op in schema.P2P_OPS:
            desc["out_shapes"] = []
        if seq is None:
            seq = self.seq.get(group, 0) + 1
        self.seq[group] = max(self.seq.get(group, 0), seq)
        if ret is None:
            ret = (end if end is not None else start) if not is_async else start
        t = ns(start)
        d_ret = ns(ret) - t
        d_end = float("nan") if end is None else ns(end) - t
        self.records.append((t, d_ret, d_end, seq, self._sig(desc), iteration, group, status))
        return self

    def span(self, phase: str, begin: float, end: float, step: int, *, module: str | None = None, grad: bool = True,
             iteration: int = 0) -> "Proc":
        if module is not None and module not in self.labels:
            self.labels[module] = len(self.labels)
        label = schema.SPAN_NO_LABEL if module is None else self.labels[module]
        phase_index = schema.SPAN_PHASES.index(phase)
        self.spans.append((phase_index, ns(begin), ns(end), step, iteration, label,
                           schema.SPAN_FLAG_GRAD if grad else 0))
        return self

    def mark(self, label: str, t: float) -> "Proc":
        self.meta.append({"type": schema.META_MARK, "kind": "mark", "label": label, "t_mono_ns": ns(t)})
        return self

    def region(self, label: str, begin: float, end: float) -> "Proc":
        self.meta.append({"type": schema.META_MARK, "kind": "region_begin", "label": label, "t_mono_ns": ns(begin)})
        self.meta.append({"type": schema.META_MARK, "kind": "region_end", "label": label, "t_mono_ns": ns(end)})
        return self

    def write(self, run_dir: str, end_us: float, run_id: str = "built") -> None:
        head = [
            {"type": schema.META_HEADER, "format": schema.FORMAT_NAME, "version": schema.FORMAT_VERSION,
             "source": "python", "record_size": schema.RECORD_SIZE, "commtrace_version": "test",
             "torch_version": "test", "host": self.host, "pid": self.pid, "rank": self.rank, "launcher": "test",
             "run_id": run_id, "command": ["train.py"], "t_wall_ns": 1_790_000_000_000_000_000, "t_mono_ns": T0},
            {"type": schema.META_WORLD, "world": 0, "t_mono_ns": T0, "world_id": self.world_id, "rank": self.rank,
             "world_size": self.world_size, "backend": "gloo"},
            {"type": schema.META_GROUP, "id": 0, "world": 0, "world_id": self.world_id, "name": self.group_name, "desc": self.group_desc,
             "backend": "gloo", "size": self.world_size, "rank": self.rank, "ranks": list(range(self.world_size))},
        ]
        rec = np.zeros(len(self.records), dtype=schema.OP_RECORD)
        for i, (t, dr, de, seq, sig, it, grp, st) in enumerate(sorted(self.records)):
            rec[i] = (t, dr, de, seq, sig, it, grp, st, 0)
        w = TraceWriter(run_dir, f"rank{self.rank}.pid{self.pid}")
        labels = [{"type": schema.META_LABEL, "id": i, "text": t} for t, i in self.labels.items()]
        w.write(head + self.sig_lines + labels + self.meta, rec, pack_spans(self.spans) if self.spans else None)
        w.write([{"type": schema.META_END, "exit_code": 0, "how": "exit", "t_wall_ns": 1_790_000_000_000_000_000,
                  "t_mono_ns": ns(end_us)}], None)
        w.close()


def write_run(run_dir, procs: list[Proc], end_us: float = 1_000.0) -> str:
    run_dir = str(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    for p in procs:
        p.write(run_dir, end_us)
    return run_dir
