"""commtrace.trace.layers.merge_cpp_layer on small synthetic frames."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from commtrace.trace.layers import merge_cpp_layer

WORLD = [0, 1, 2, 3]


def py_row(seq, op, t, group="0", ranks=WORLD, pid=100, rank=0, **kw):
    return dict(rank=rank, world=0, group=group, group_ranks=list(ranks), seq=seq, op=op,
                variant=op, t_start_ns=t, t_return_ns=t + 50, t_end_ns=t + 1000,
                status="completed", source="python", pid=pid, **kw)


def cpp_row(seq, op, t_enq, wait, run, group="mpi:[0,1,2,3]", ranks=WORLD, pid=100, rank=0,
            generic=True, **kw):
    """A C++-layer row: enqueued at t_enq, dequeued wait later, run function done run after that."""
    row = dict(rank=rank, world=0, group=group, group_ranks=list(ranks), seq=seq, op=op,
               variant="mpi:" + op, status="completed", source="cpp", pid=pid,
               file=f"rank{rank}.pid{pid}.cpp", **kw)
    if generic:  # times in the generic columns (t_call / d_return / d_end)
        row.update(t_start_ns=t_enq, t_return_ns=t_enq + wait, t_end_ns=t_enq + wait + run)
    else:        # times in the C++-specific columns
        row.update(t_start_ns=np.nan, t_return_ns=np.nan, t_end_ns=np.nan,
                   t_enqueue_ns=t_enq, t_dequeue_ns=t_enq + wait, t_run_end_ns=t_enq + wait + run)
    return row


def frame(rows):
    return pd.DataFrame(rows)


def test_no_cpp_rows_adds_nan_columns():
    f = frame([py_row(1, "all_reduce", 0), py_row(2, "broadcast", 2000)])
    out = merge_cpp_layer(f)
    assert len(out) == 2
    for col in ("queue_wait_ns", "pre_mpi_ns", "mpi_ns", "post_mpi_ns", "run_ns", "t_enqueue_ns", "t_dequeue_ns",
                "t_mpi_begin_ns", "t_mpi_end_ns", "t_run_end_ns"):
        assert col in out and out[col].isna().all()
    assert "queue_wait_ns" not in f  # input untouched


def test_simple_match_in_seq_order():
    f = frame([
        py_row(1, "all_reduce", 0), py_row(2, "all_reduce", 2000), py_row(3, "barrier", 4000),
        cpp_row(1, "all_reduce", 10, 5, 500), cpp_row(2, "all_reduce", 2010, 300, 400),
        cpp_row(3, "barrier", 4010, 1, 100),
    ])
    out = merge_cpp_layer(f)
    assert list(out["source"]) == ["python"] * 3
    assert list(out["queue_wait_ns"]) == [5, 300, 1]
    assert list(out["run_ns"]) == [500, 400, 100]
    assert out["mpi_ns"].isna().all()  # no MPI call times given
    assert list(out["t_enqueue_ns"]) == [10, 2010, 4010]
    # python's own times are kept
    assert list(out["t_start_ns"]) == [0, 2000, 4000]


def test_cpp_specific_time_columns():
    f = frame([py_row(1, "all_reduce", 0), cpp_row(1, "all_reduce", 10, 7, 70, generic=False)])
    out = merge_cpp_layer(f)
    assert len(out) == 1
    assert out["queue_wait_ns"].iloc[0] == 7 and out["run_ns"].iloc[0] == 70


def test_unmatched_cpp_rows_stay_as_cpp():
    f = frame([
        py_row(1, "all_reduce", 0, pid=100),
        cpp_row(1, "all_reduce", 10, 5, 50, pid=100),
        cpp_row(2, "all_reduce", 3000, 6, 60, pid=100),   # no python counterpart
        cpp_row(1, "all_reduce", 10, 8, 80, pid=200),     # other process: never matched
    ])
    out = merge_cpp_layer(f)
    assert sorted(out["source"]) == ["cpp", "cpp", "python"]
    cpp = out[out["source"] == "cpp"].sort_values("pid")
    assert list(cpp["queue_wait_ns"]) == [6, 8]
    assert list(cpp["run_ns"]) == [60, 80]


def test_same_pid_required_and_same_ranks_required():
    f = frame([
        py_row(1, "all_reduce", 0, pid=1),
        cpp_row(1, "all_reduce", 10, 5, 50, pid=2),
        py_row(1, "all_reduce", 0, group="1", ranks=[0, 2], pid=3),
        cpp_row(1, "all_reduce", 10, 5, 50, ranks=[0, 1], group="mpi:[0,1]", pid=3),
    ])
    out = merge_cpp_layer(f)
    assert len(out) == 4
    assert out.loc[out["source"] == "python", "queue_wait_ns"].isna().all()


def test_ranks_compared_as_sets():
    f = frame([
        py_row(1, "all_reduce", 0, group="g", ranks=[2, 0]),
        cpp_row(1, "all_reduce", 10, 5, 50, group="mpi:[0,2]", ranks=np.array([0, 2])),
    ])
    out = merge_cpp_layer(f)
    assert len(out) == 1 and out["queue_wait_ns"].iloc[0] == 5


def test_op_missing_in_one_layer_does_not_shift_the_rest():
    # Python saw an all_gather that never reached the MPI queue (failed its checks),
    # and C++ saw an op the wrapper did not (e.g. called from C++ directly).
    f = frame([
        py_row(1, "all_reduce", 0), py_row(2, "all_gather", 1000), py_row(3, "broadcast", 2000),
        py_row(4, "all_reduce", 3000),
        cpp_row(1, "all_reduce", 10, 1, 10), cpp_row(2, "broadcast", 2010, 2, 20),
        cpp_row(3, "barrier", 2500, 9, 99), cpp_row(4, "all_reduce", 3010, 3, 30),
    ])
    out = merge_cpp_layer(f).sort_values("t_start_ns")
    py = out[out["source"] == "python"].set_index("seq")
    assert py.loc[1, "queue_wait_ns"] == 1
    assert np.isnan(py.loc[2, "queue_wait_ns"])
    assert py.loc[3, "queue_wait_ns"] == 2
    assert py.loc[4, "queue_wait_ns"] == 3
    cpp = out[out["source"] == "cpp"]
    assert list(cpp["op"]) == ["barrier"] and cpp["run_ns"].iloc[0] == 99


def test_two_groups_with_same_ranks_paired_by_first_op():
    f = frame([
        py_row(1, "all_reduce", 100, group="1", ranks=[0, 1]),
        py_row(1, "broadcast", 50, group="2", ranks=[0, 1]),    # group "2" used first
        py_row(2, "broadcast", 300, group="2", ranks=[0, 1]),
        cpp_row(1, "broadcast", 55, 1, 10, group="mpi:[0,1]#1", ranks=[0, 1]),
        cpp_row(2, "broadcast", 305, 2, 20, group="mpi:[0,1]#1", ranks=[0, 1]),
        cpp_row(1, "all_reduce", 105, 3, 30, group="mpi:[0,1]", ranks=[0, 1]),
    ])
    out = merge_cpp_layer(f)
    assert (out["source"] == "python").all()
    got = {(r.group, r.seq): r.queue_wait_ns for r in out.itertuples()}
    assert got == {("1", 1): 3, ("2", 1): 1, ("2", 2): 2}


def test_p2p_matched_per_op_and_peer_in_call_order():
    f = frame([
        py_row(1, "send", 0, peer=1), py_row(1, "send", 100, peer=2), py_row(2, "send", 200, peer=1),
        py_row(1, "recv", 300, peer=1),
        cpp_row(7, "send", 5, 1, 10, peer=1), cpp_row(8, "send", 105, 2, 20, peer=2),
        cpp_row(9, "send", 205, 3, 30, peer=1), cpp_row(10, "recv", 305, 4, 40, peer=1),
    ])
    out = merge_cpp_layer(f)
    assert (out["source"] == "python").all()
    assert list(out.sort_values("t_start_ns")["queue_wait_ns"]) == [1, 2, 3, 4]


def test_in_flight_cpp_row_keeps_nan_split():
    r = cpp_row(1, "all_reduce", 10, 5, 0)
    r.update(t_return_ns=np.nan, t_end_ns=np.nan, status="in_flight")
    f = frame([py_row(1, "all_reduce", 0), r])
    out = merge_cpp_layer(f)
    assert len(out) == 1
    assert out["t_enqueue_ns"].iloc[0] == 10
    assert np.isnan(out["queue_wait_ns"].iloc[0]) and np.isnan(out["run_ns"].iloc[0])


def test_non_unique_index_and_original_order():
    f = frame([
        py_row(1, "all_reduce", 0), cpp_row(1, "all_reduce", 10, 5, 50),
        py_row(2, "all_reduce", 100),
    ])
    f.index = [0, 0, 0]
    out = merge_cpp_layer(f)
    assert list(out["seq"]) == [1, 2]
    assert list(out["queue_wait_ns"].fillna(-1)) == [5, -1]


@pytest.mark.parametrize("n_ranks", [2, 4])
def test_many_ranks_each_merges_own_pid(n_ranks):
    rows = []
    for r in range(n_ranks):
        for s in range(1, 6):
            rows.append(py_row(s, "all_reduce", s * 1000, pid=1000 + r, rank=r))
            rows.append(cpp_row(s, "all_reduce", s * 1000 + 5, r + s, 10 * s, pid=1000 + r, rank=r))
    out = merge_cpp_layer(frame(rows))
    assert len(out) == 5 * n_ranks and (out["source"] == "python").all()
    for r in range(n_ranks):
        sub = out[out["rank"] == r].sort_values("seq")
        assert list(sub["queue_wait_ns"]) == [r + s for s in range(1, 6)]


def mpi_calls(rows):
    return pd.DataFrame(rows, columns=["file", "group", "seq", "d_mpi_begin", "d_mpi_end"])


def test_mpi_call_times_split_the_run():
    """Hand-computed: enqueued at 10, dequeued at 15, MPI call 115..415, run end 515
    (offsets from the enqueue: 105 and 405). queue 5, pre 100 (lock wait + copies),
    MPI 300, post 100 (copies out), run 500 = 100 + 300 + 100."""
    f = frame([py_row(1, "all_gather", 0), py_row(2, "barrier", 2000),
               cpp_row(1, "all_gather", 10, 5, 500), cpp_row(2, "barrier", 2010, 1, 50)])
    calls = mpi_calls([("rank0.pid100.cpp", "mpi:[0,1,2,3]", 1, 105.0, 405.0),
                       ("rank0.pid200.cpp", "mpi:[0,1,2,3]", 2, 1.0, 2.0)])  # another process: not ours
    out = merge_cpp_layer(f, calls).set_index("seq")
    ag = out.loc[1]
    assert (ag["t_enqueue_ns"], ag["t_dequeue_ns"], ag["t_mpi_begin_ns"], ag["t_mpi_end_ns"], ag["t_run_end_ns"]) \
        == (10, 15, 115, 415, 515)
    assert (ag["queue_wait_ns"], ag["pre_mpi_ns"], ag["mpi_ns"], ag["post_mpi_ns"], ag["run_ns"]) \
        == (5, 100, 300, 100, 500)
    barrier = out.loc[2]  # no MPI call record for it: the run is known, its parts are not
    assert barrier["run_ns"] == 50 and np.isnan(barrier["mpi_ns"]) and np.isnan(barrier["pre_mpi_ns"])


def test_mpi_call_times_need_file_group_and_seq():
    f = frame([cpp_row(1, "all_reduce", 10, 5, 500, group="mpi:[0,1]#1", ranks=[0, 1])])
    out = merge_cpp_layer(f, mpi_calls([("rank0.pid100.cpp", "mpi:[0,1]", 1, 105.0, 405.0)]))
    assert np.isnan(out["mpi_ns"].iloc[0])  # same seq, other group (the first [0,1] group)
    out = merge_cpp_layer(f, mpi_calls([("rank0.pid100.cpp", "mpi:[0,1]#1", 1, 105.0, 405.0)]))
    assert out["mpi_ns"].iloc[0] == 300


def test_a_recv_from_any_source_pairs_only_with_one():
    """The patch records recvs from any source (not queued; their sender in a ``source``
    line), and no recv from a peer: the C++ row of the first pairs with the Python row of
    the first recv from any source, not with the earlier recv from a peer."""
    f = frame([
        py_row(1, "recv", 0, root=1), dict(py_row(1, "recv", 100, root=2), variant="recv_anysource"),
        dict(cpp_row(1, "recv", 105, 0, 30, root=2), variant="recv_anysource"),
    ])
    out = merge_cpp_layer(f)
    assert (out["source"] == "python").all() and len(out) == 2
    assert list(out.sort_values("t_start_ns")["t_enqueue_ns"].isna()) == [True, False]
