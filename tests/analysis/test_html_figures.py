"""The HTML report's own figures (analysis.figures), values by hand."""
import numpy as np
import pytest

from commtrace.analysis.figures import arrival_offsets, bandwidth_by_size, slowest_steps, step_breakdown
from commtrace.analysis.partitioned import analyse

import scenarios
from tracebuilder import Proc, write_run

US = 1000


def test_step_breakdown_parts_of_the_ddp_scenario(tmp_path):
    # scenarios.ddp_two_steps, rank 0: step 1 = 60 us, comm 28, compute 39, exposed 19;
    # step 2 = 50 us, comm 23, compute 35, exposed 14 (tests/analysis/test_step_figures.py).
    rep = analyse(scenarios.ddp_two_steps(tmp_path / "run"), op_view=True)
    parts = step_breakdown(rep.steps.per_rank).set_index(["rank", "step"])
    s1 = parts.loc[(0, 1)]
    # hidden = 28 - 19 = 9; compute only = 39 - 9 = 30; other = 60 - 30 - 9 - 19 = 2
    assert [s1[c] for c in ("hidden_ns", "compute_only_ns", "exposed_ns", "other_ns")] == [9 * US, 30 * US, 19 * US,
                                                                                            2 * US]
    s2 = parts.loc[(0, 2)]
    # hidden = 23 - 14 = 9; compute only = 35 - 9 = 26; other = 50 - 26 - 9 - 14 = 1
    assert [s2[c] for c in ("hidden_ns", "compute_only_ns", "exposed_ns", "other_ns")] == [9 * US, 26 * US, 14 * US,
                                                                                            1 * US]
    total = parts[["compute_only_ns", "hidden_ns", "exposed_ns", "other_ns"]].sum(axis=1)
    assert np.allclose(total, parts["step_ns"])


def test_slowest_steps_keeps_step_order():
    import pandas as pd
    across = pd.DataFrame({"step_ns": [5, 9, 1, 7]}, index=pd.Index([1, 2, 3, 4], name="step"))
    assert slowest_steps(across, 10) == [1, 2, 3, 4]
    assert slowest_steps(across, 2) == [2, 4]


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """4 ranks: two 1000-byte all_reduces, one 4000-byte broadcast, one send/recv pair."""
    procs = [Proc(r, world_size=4) for r in range(4)]
    for r, p in enumerate(procs):
        # all_reduce seq 1: rank r from 2r to 2r + 10 us (slowest 10 us; ranks arrive 0, 2, 4, 6 us)
        p.op("all_reduce", 2 * r, 2 * r + 10, nbytes=1000, is_async=False)
        # all_reduce seq 2: durations 20, 30, 25, 20 us (slowest 30 us)
        p.op("all_reduce", 100, 100 + (20, 30, 25, 20)[r], nbytes=1000, is_async=False)
        # broadcast seq 3: durations 5, 8, 5, 5 us (slowest 8)
        p.op("broadcast", 200, 200 + (5, 8, 5, 5)[r], nbytes=4000, is_async=False, root=0)
    procs[0].op("send", 300, 350, nbytes=4000, seq=1, group=0, root=1)
    procs[1].op("recv", 300, 350, nbytes=4000, seq=1, group=0, root=0)
    return analyse(write_run(tmp_path_factory.mktemp("bw") / "run", procs), op_view=True)


def test_bandwidth_by_size(four_ranks):
    bw = bandwidth_by_size(four_ranks.op_view.matched).set_index(["op", "size_bytes"])
    assert list(bw.index) == [("all_reduce", 1000), ("broadcast", 4000)]   # send/recv: not a collective
    ar = bw.loc[("all_reduce", 1000)]
    assert ar["collectives"] == 2
    # algbw = (1000 + 1000) B / (10 + 30) us = 50e6 B/s; busbw x 2(n-1)/n = 1.5 -> 75e6
    assert ar["algbw"] == pytest.approx(50e6)
    assert ar["busbw"] == pytest.approx(75e6)
    bc = bw.loc[("broadcast", 4000)]
    # 4000 B / 8 us = 500e6 B/s, factor 1
    assert (bc["collectives"], bc["algbw"], bc["busbw"]) == (1, pytest.approx(500e6), pytest.approx(500e6))


def test_arrival_offsets(four_ranks):
    off = arrival_offsets(four_ranks.op_view.frame, four_ranks.op_view.matched, limit=2)
    assert off["ranks"] == [0, 1, 2, 3]
    assert off["collectives"] == 3            # the send/recv pair is not one
    assert off["op"] == ["all_reduce", "all_reduce"] and list(off["seq"]) == [1, 2]
    # seq 1: ranks arrive at 0, 2, 4, 6 us; seq 2: all at 100 us
    assert off["offset_ns"][:, 0].tolist() == [0, 2 * US, 4 * US, 6 * US]
    assert off["offset_ns"][:, 1].tolist() == [0, 0, 0, 0]


def test_bandwidth_flags_one_rank_and_observed_ends(tmp_path):
    from synthetic import write_synthetic_run
    one = analyse(write_synthetic_run(str(tmp_path / "one"), ranks=1, ops_per_rank=30, end_observed=True),
                  op_view=True)
    bw = bandwidth_by_size(one.op_view.matched)
    assert len(bw) and bw["one_rank"].all() and bw["observed"].all()


def test_bandwidth_flags_off_for_a_plain_group(four_ranks):
    bw = bandwidth_by_size(four_ranks.op_view.matched)
    assert not bw["one_rank"].any() and not bw["observed"].any()


def test_steps_across_ranks_by_hand():
    import pandas as pd
    from commtrace.analysis.figures import steps_across_ranks
    parts = pd.DataFrame({"rank": [0, 1, 0, 1], "step": [1, 1, 2, 2], "step_ns": [10, 14, 8, 9],
                          "compute_only_ns": [4, 6, 3, 3], "hidden_ns": [2, 2, 1, 1], "exposed_ns": [3, 5, 4, 4],
                          "other_ns": [1, 1, 0, 1]})
    m = steps_across_ranks(parts)
    # step 1: means (4+6)/2 = 5, 2, (3+5)/2 = 4, 1; step time mean 12, min 10, max 14
    assert m.loc[1].tolist() == [2, 5, 2, 4, 1, 12, 10, 14]
    # step 2: 3, 1, 4, 0.5; step time 8.5, 8 .. 9
    assert m.loc[2].tolist() == [2, 3, 1, 4, 0.5, 8.5, 8, 9]


def test_steady_start():
    import pandas as pd
    from commtrace.analysis.figures import steady_start
    assert steady_start(pd.DataFrame({"rank": [0, 1, 0, 1], "step": [1, 1, 2, 2]})) == 2
    assert steady_start(pd.DataFrame({"rank": [0, 0, 0], "step": [37, 38, 39]})) == 38   # a bounded trace
    assert steady_start(pd.DataFrame({"rank": [0, 1], "step": [1, 1]})) is None


def test_exposure_intervals_by_hand(tmp_path):
    from commtrace.analysis.figures import exposure_intervals
    p = Proc(0, world_size=1)
    p.span("forward", 0, 10, step=1)
    p.span("backward", 10, 30, step=1)
    p.span("optimizer", 45, 50, step=1)
    p.op("all_reduce", 20, 40, nbytes=4000, phase="backward")        # async: compute goes on until 30 us
    p.op("broadcast", 2, 4, nbytes=8, is_async=False, phase="forward")  # blocking: its 2 us are waited
    rep = analyse(write_run(tmp_path / "run", [p], end_us=60), op_view=True)
    ex = exposure_intervals(rep.op_view.frame, rep.op_view.arrays, rep.op_view.spans, rep.bounds)
    zero = int(rep.info["t0_ns"]) - 2 * US                            # t0: the first op, at 2 us
    got = sorted((bool(e), (int(b) - zero) // US, (int(t) - zero) // US)
                 for e, b, t in zip(ex["exposed"], ex["t_begin_ns"], ex["t_end_ns"]))
    # hidden: the all_reduce under backward (20-30); exposed: the rest of it (30-40) and the broadcast (2-4)
    assert got == [(False, 20, 30), (True, 2, 4), (True, 30, 40)]
    # the step table measures the same: exposed 12 us, comm 22 us
    row = rep.steps.per_rank.iloc[0]
    assert (row["exposed_ns"], row["comm_ns"]) == (12 * US, 22 * US)


def test_binned_majority_by_hand():
    from commtrace.analysis import intervals as iv
    from commtrace.analysis.figures import binned_majority
    a = iv.union(np.array([0, 25]), np.array([10, 40]))     # covers 0-10 and 25-40
    b = iv.union(np.array([10]), np.array([22]))             # covers 10-22
    best, fill = binned_majority([a, b], 0, 40, 4)           # bins of 10: 0-10, 10-20, 20-30, 30-40
    # bin 0: a 10; bin 1: b 10; bin 2: a 5 (25-30) > b 2 (20-22); bin 3: a 10
    assert best.tolist() == [0, 1, 0, 0] and fill.tolist() == [1.0, 1.0, 0.5, 1.0]
    best, _ = binned_majority([a, b], 40, 60, 2)             # nothing there
    assert best.tolist() == [-1, -1]
