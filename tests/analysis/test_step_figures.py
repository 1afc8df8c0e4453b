"""Step, compute, communication and exposed time on constructed traces (values by hand: scenarios.py)."""
import pytest

from commtrace.analysis.partitioned import analyse
from commtrace.analysis.window import Window

import scenarios

US = 1000


def report(run_dir, **window):
    return analyse(run_dir, window=Window.from_args(**window), op_view=True)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    return scenarios.ddp_two_steps(tmp_path_factory.mktemp("ddp") / "run")


def test_per_rank_step_figures(ddp):
    per = report(ddp).steps.per_rank.set_index(["rank", "step"])
    r0s1 = per.loc[(0, 1)]
    assert (r0s1["step_ns"], r0s1["comm_ns"], r0s1["compute_ns"], r0s1["exposed_ns"]) == (60 * US, 28 * US, 39 * US, 19 * US)
    assert (r0s1["ops"], r0s1["bytes"], r0s1["micro_steps"]) == (2, 6000, 1)
    r0s2 = per.loc[(0, 2)]
    assert (r0s2["step_ns"], r0s2["comm_ns"], r0s2["compute_ns"], r0s2["exposed_ns"]) == (50 * US, 23 * US, 35 * US, 14 * US)
    assert (r0s2["ops"], r0s2["bytes"]) == (3, 6040)
    r1s2 = per.loc[(1, 2)]
    assert (r1s2["step_ns"], r1s2["compute_ns"], r1s2["exposed_ns"]) == (55 * US, 40 * US, 14 * US)


def test_never_more_communication_than_step(ddp):
    per = report(ddp).steps.per_rank
    assert (per["exposed_ns"] <= per["comm_ns"]).all()
    assert (per["comm_ns"] <= per["step_ns"]).all()
    assert (per["compute_ns"] + per["exposed_ns"] <= per["step_ns"]).all()


def test_across_ranks(ddp):
    across = report(ddp).steps.across
    s2 = across.loc[2]
    assert s2["step_ns"] == 55 * US          # the slowest rank's step
    assert s2["slowest_rank"] == 1
    assert s2["compute_ns"] == 37.5 * US     # mean of 35 and 40
    assert (s2["comm_ns"], s2["exposed_ns"], s2["ops"], s2["ranks"]) == (23 * US, 14 * US, 3, 2)


def test_ops_outside_steps_are_never_in_a_step(ddp):
    out = report(ddp).steps.outside
    assert out.loc["before the first step", "ops"] == 2 and out.loc["before the first step", "comm_ns"] == 5 * US
    assert out.loc["between steps", "ops"] == 2 and out.loc["between steps", "comm_ns"] == 3 * US
    assert out.loc["after the last step", "ops"] == 2 and out.loc["after the last step", "comm_ns"] == 10 * US


def test_accumulation_counts_optimizer_steps(tmp_path):
    rep = report(scenarios.accumulation(tmp_path / "run"))
    per = rep.steps.per_rank.set_index("step")
    assert list(per.index) == [1, 2]
    assert per.loc[1, "micro_steps"] == 2 and per.loc[1, "step_ns"] == 55 * US
    assert per.loc[2, "micro_steps"] == 1 and per.loc[2, "step_ns"] == 25 * US   # from 70: not the eval forward
    # step 1: comm [35,48] = 13; waits [35,36] + DDP tail [35,50]; exposed = 13, hidden 0
    assert per.loc[1, "comm_ns"] == 13 * US and per.loc[1, "exposed_ns"] == 13 * US
    assert per.loc[1, "compute_ns"] == 40 * US   # [0,35) + [50,55]
    assert rep.steps.outside.loc["between steps", "ops"] == 1   # the eval forward's broadcast


def test_zero_overlap_step_is_compute(tmp_path):
    # the ZeRO local step inside DDP's tail counts as compute, but for its broadcasts' wait (scenarios.py)
    per = report(scenarios.zero_overlap(tmp_path / "run")).steps.per_rank.set_index("step")
    r = per.loc[1]
    assert (r["step_ns"], r["comm_ns"], r["compute_ns"], r["exposed_ns"]) == (38 * US, 22 * US, 27 * US, 10 * US)


def test_window_steps(ddp):
    rep = report(ddp, steps="2:2")
    assert list(rep.steps.across.index) == [2]
    assert len(rep.op_view.frame) == 6                                 # broadcast + 2 buckets on each rank
    assert rep.info["comm_share_per_rank"][0] == pytest.approx(23 / 50)
    assert rep.info["comm_share_per_rank"][1] == pytest.approx(23 / 55)
    assert rep.steps.outside["ops"].sum() == 0
    assert rep.by_op.loc["all_reduce", "collectives"] == 2


def test_skip_steps_is_steps_from_n_plus_1(ddp):
    a, b = report(ddp, skip_steps=1), report(ddp, steps="2:")
    assert list(a.steps.across.index) == list(b.steps.across.index) == [2]
    assert len(a.op_view.frame) == len(b.op_view.frame) == 6


def test_window_time_range(ddp):
    rep = report(ddp, t_from="0us", t_to="100us")
    assert list(rep.steps.across.index) == [1]                 # step 2 is not entirely inside
    # ops starting in [0, 100] us: all_gather, 2 buckets, the between-steps all_reduce,
    # the buffer broadcast and the first bucket of step 2, on both ranks
    assert len(rep.op_view.frame) == 12
    assert rep.info["comm_ns_per_rank"][0] == (5 + 28 + 3 + 4 + 0) * US   # clipped at 100


def test_window_phase(ddp):
    rep = report(ddp, phase="backward")
    per = rep.steps.per_rank.set_index(["rank", "step"])
    assert per.loc[(0, 2), "comm_ns"] == 19 * US                # buckets only
    assert per.loc[(0, 2), "exposed_ns"] == 10 * US             # [100,101] + [110,119]
    assert per.loc[(0, 2), "compute_ns"] == 35 * US             # compute does not depend on the filter
    assert set(rep.op_view.frame["phase"].astype(str)) == {"backward"}


def test_load_steps_table(ddp):
    import commtrace
    steps = commtrace.load(ddp, table="steps").set_index(["rank", "step"])
    assert steps.loc[(1, 2), "step_ns"] == 55 * US and steps.loc[(0, 1), "exposed_ns"] == 19 * US
    spans = commtrace.load(ddp, table="spans")
    assert sorted(spans["phase"].unique()) == ["backward", "forward", "optimizer"] and len(spans) == 12


def test_steps_keep_their_numbers(tmp_path):
    """A trace that kept only steps 10..12 (bounded) shows steps 10..12, and --steps selects by those
    numbers; a rank with two processes one after another numbers the second's steps after the first's."""
    from tracebuilder import Proc, write_run
    p = Proc(0, world_size=1)
    for k in (10, 11, 12):
        t = 100.0 * k
        p.span("forward", t, t + 10, k).span("backward", t + 10, t + 30, k)
        p.op("all_reduce", t + 12, t + 20, is_async=False, phase="backward")
        p.span("optimizer", t + 30, t + 40, k)
    d = write_run(tmp_path / "bounded", [p], end_us=2000)
    assert list(report(d).steps.across.index) == [10, 11, 12]
    assert list(report(d, steps="11").steps.across.index) == [11]
    assert report(d).steps.total_steps == 12
    first, second = Proc(0, world_size=1, pid=1), Proc(0, world_size=1, pid=2)
    for proc, base in ((first, 0.0), (second, 1000.0)):
        for k in (1, 2):
            t = base + 100.0 * k
            proc.span("backward", t, t + 10, k).op("all_reduce", t + 2, t + 8, is_async=False, phase="backward")
            proc.span("optimizer", t + 10, t + 20, k)
    d = write_run(tmp_path / "two", [first, second], end_us=3000)
    assert list(report(d).steps.per_rank["step"]) == [1, 2, 3, 4]


def test_steps_in_rank_then_begin_order():
    """find_steps skips its sort when the rows are already in (rank, begin) order."""
    import numpy as np
    from commtrace.analysis.steps import _in_order
    assert _in_order(np.array([0, 0, 1, 1]), np.array([5, 9, 1, 1]))
    assert not _in_order(np.array([0, 0, 1]), np.array([9, 5, 1]))
    assert not _in_order(np.array([1, 0]), np.array([1, 2]))
    assert _in_order(np.array([3]), np.array([7]))
