"""Step, compute, communication and exposed time on constructed traces (values by hand: scenarios.py)."""
import pytest

from commtrace.analysis.report import build_report
from commtrace.analysis.run_info import load_report_run
from commtrace.analysis.window import Window

import scenarios

US = 1000


def report(run_dir, **window):
    return build_report(load_report_run(run_dir), Window.from_args(**window))


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


def test_window_steps(ddp):
    rep = report(ddp, steps="2:2")
    assert list(rep.steps.across.index) == [2]
    assert len(rep.frame) == 6                                 # broadcast + 2 buckets on each rank
    assert rep.info["comm_share_per_rank"][0] == pytest.approx(23 / 50)
    assert rep.info["comm_share_per_rank"][1] == pytest.approx(23 / 55)
    assert rep.steps.outside["ops"].sum() == 0
    assert rep.by_op.loc["all_reduce", "collectives"] == 2


def test_skip_steps_is_steps_from_n_plus_1(ddp):
    a, b = report(ddp, skip_steps=1), report(ddp, steps="2:")
    assert list(a.steps.across.index) == list(b.steps.across.index) == [2]
    assert len(a.frame) == len(b.frame) == 6


def test_window_time_range(ddp):
    rep = report(ddp, t_from="0us", t_to="100us")
    assert list(rep.steps.across.index) == [1]                 # step 2 is not entirely inside
    # ops starting in [0, 100] us: all_gather, 2 buckets, the between-steps all_reduce,
    # the buffer broadcast and the first bucket of step 2, on both ranks
    assert len(rep.frame) == 12
    assert rep.info["comm_ns_per_rank"][0] == (5 + 28 + 3 + 4 + 0) * US   # clipped at 100


def test_window_phase(ddp):
    rep = report(ddp, phase="backward")
    per = rep.steps.per_rank.set_index(["rank", "step"])
    assert per.loc[(0, 2), "comm_ns"] == 19 * US                # buckets only
    assert per.loc[(0, 2), "exposed_ns"] == 10 * US             # [100,101] + [110,119]
    assert per.loc[(0, 2), "compute_ns"] == 35 * US             # compute does not depend on the filter
    assert set(rep.frame["phase"].astype(str)) == {"backward"}


def test_load_steps_table(ddp):
    import commtrace
    steps = commtrace.load(ddp, table="steps").set_index(["rank", "step"])
    assert steps.loc[(1, 2), "step_ns"] == 55 * US and steps.loc[(0, 1), "exposed_ns"] == 19 * US
    spans = commtrace.load(ddp, table="spans")
    assert sorted(spans["phase"].unique()) == ["backward", "forward", "optimizer"] and len(spans) == 12
