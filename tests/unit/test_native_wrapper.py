"""The native wrapper's log in-process: a forked child starts with none of the
parent's rows, and the flush thread's drain keeps ops in call order.

The inner group is a real one-rank backend written in Python (completed Works),
so no gloo threads cross the fork.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist

from commtrace import torch_compat

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402
from commtrace.capture import native_wrapper  # noqa: E402
from commtrace.capture.recorder import Recorder  # noqa: E402
from commtrace.trace.reader import load_run  # noqa: E402


class _DoneBackend(dist.ProcessGroup):
    def __init__(self):
        super().__init__(0, 1)

    def getBackendName(self):
        return "done"

    def allreduce(self, tensors, opts=None):
        fut = torch.futures.Future()
        fut.set_result(tensors)
        return torch._C._distributed_c10d._create_work_from_future(fut)


def _traced(run_dir):
    h.ensure_native_wrapper()
    rec = Recorder(str(run_dir), "run", "none", ["test"])
    rec.add_world({"world_id": "w", "rank": 0, "world_size": 1, "backend": "done"})
    gid = rec.add_group({"name": "0", "world_id": "w", "size": 1, "ranks": [0], "rank": 0, "backend": "done"})
    traced = native_wrapper.make_traced(_DoneBackend(), rec, gid, [0], "native")  # allreduce: bridged by torch's trampoline
    assert type(traced).__name__ == "TracedPG"
    return rec, traced


def _allreduce(pg, n, async_op=False):
    opts = torch_compat.make_options(dist.AllreduceOptions, async_op=async_op)
    for _ in range(n):
        pg.allreduce([torch.ones(2)], opts).wait()


def test_forked_child_drops_the_parents_rows(tmp_path):
    rec, traced = _traced(tmp_path)
    _allreduce(traced, 3)            # buffered in the native log, not yet flushed
    pid = os.fork()
    if pid == 0:                     # child: its own file, one op of its own
        code = 1
        try:
            _allreduce(traced, 1)
            rec.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    rec.close()
    frame = load_run(str(tmp_path)).frame
    per_pid = frame.groupby("pid")["seq"].apply(list).to_dict()
    assert per_pid == {os.getpid(): [1, 2, 3], pid: [4]}   # the child's seq goes on from the parent's


def test_drain_keeps_call_order_across_blocking_and_async(tmp_path):
    rec, traced = _traced(tmp_path)
    _allreduce(traced, 2)
    _allreduce(traced, 2, async_op=True)
    _allreduce(traced, 1)
    rec.close()
    df = load_run(str(tmp_path)).frame.sort_values("t_start_ns")
    assert df["seq"].tolist() == [1, 2, 3, 4, 5]
    # Before torch 2.8 AllreduceOptions has no asyncOp: every op counts as asynchronous
    # (README "What tracing changes").
    says = torch_compat.has_async_op(dist.AllreduceOptions)
    assert df["async"].tolist() == ([False, False, True, True, False] if says else [True] * 5)
    assert set(df["status"]) == {"completed"} and not df["end_observed"].any()
    assert (df["t_end_ns"] >= df["t_start_ns"]).all()
    assert set(df["callsite"].str.split(":").str[0]) == {os.path.join("tests", "unit", "test_native_wrapper.py")}


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_layouts_are_counted_from_their_stored_parts(tmp_path):
    """Each sparse layout a program can hand a group's allreduce directly (COO at two nnz, CSR,
    BSR) is counted at its indices and values, per op, by both wrappers (the native one keys each
    size; compressed layouts never reach a group through dist.all_reduce: the dispatcher has no
    kernel for them)."""
    from commtrace.capture.wrapper import TracedProcessGroup
    dense = torch.zeros(6, 4)
    dense[1, 2] = dense[4, 0] = 1.0
    coo2 = dense.to_sparse()
    dense[5, 3] = 1.0
    coo3 = dense.to_sparse()
    csr, bsr = dense.to_sparse_csr(), dense.to_sparse_bsr((2, 2))
    expected = [2 * (2 * 8 + 4), 3 * (2 * 8 + 4),                 # COO: 2 int64 indices + a float32 value per nnz
                7 * 8 + 3 * 8 + 3 * 4,                            # CSR: crow (rows + 1), col and values
                4 * 8 + bsr._nnz() * 8 + bsr._nnz() * 2 * 2 * 4]  # BSR: crow (block rows + 1), col, 2x2 blocks
    for kind in ("native", "python"):
        run_dir = tmp_path / kind
        rec, traced = _traced(run_dir)
        if kind == "python":
            traced = TracedProcessGroup(_DoneBackend(), rec, 0, [0])
        opts = torch_compat.make_options(dist.AllreduceOptions, async_op=False)
        for t in (coo2, coo3, coo2, csr, bsr):
            traced.allreduce([t], opts).wait()
        rec.close()
        df = load_run(str(run_dir)).frame.sort_values("t_start_ns")
        assert df["bytes"].tolist() == [expected[0], expected[1], expected[0], expected[2], expected[3]], kind
        assert df["shapes"].tolist() == ["[[6,4]]"] * 5
