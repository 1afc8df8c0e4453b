"""The per-phase table files each op under its own rank's phase (join runs)."""
from commtrace.analysis.partitioned import analyse

import scenarios


def test_join_phases_per_rank(tmp_path):
    rep = analyse(scenarios.join(tmp_path / "run"), op_view=True)
    ph = rep.by_phase.reset_index().set_index(["phase", "op", "detail"])
    bw = ph.loc[("backward", "all_reduce", "-")]
    assert (bw["ops"], bw["collectives"], bw["bytes"]) == (3, 2, 12000)
    jc = ph.loc[("join", "all_reduce", "join_count")]
    assert (jc["ops"], jc["collectives"], jc["bytes"]) == (1, 1, 4)
    js = ph.loc[("join", "all_reduce", "join_shadow_grad")]
    assert (js["ops"], js["collectives"], js["bytes"]) == (1, 1, 4000)
    fw = ph.loc[("forward", "all_reduce", "join_sync_flag")]
    assert (fw["ops"], fw["collectives"]) == (1, 1)
    split = rep.split.set_index("seq")
    assert list(split.index) == [2, 3]
    assert split.loc[2, "by_rank"] == "forward: 1; join: 0"
    assert split.loc[3, "by_rank"] == "backward: 1; join: 0"
    # the per-op table still counts each collective once
    assert rep.by_op.loc["all_reduce", "collectives"] == 3
    assert rep.by_op.loc["all_reduce", "ops"] == 6


def test_join_steps_per_rank(tmp_path):
    rep = analyse(scenarios.join(tmp_path / "run"), op_view=True)
    across = rep.steps.across
    assert across.loc[1, "ranks"] == 2 and across.loc[2, "ranks"] == 1
    assert rep.steps.outside.loc["after the last step", "ops"] == 2   # rank 0's join collectives
