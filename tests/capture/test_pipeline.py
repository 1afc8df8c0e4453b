"""Pipeline-parallel schedules (torch.distributed.pipelining) on 2 spawned gloo ranks: their
stages run plain modules, whose forwards are the ranks' compute; a schedule's step() begins the
step; its activations and gradients are phase forward and backward of the stage's module."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

import helpers as h
from helpers import Launch

W, STEPS, MICRO = 2, 3, 4  # as workers/pipeline.py


@pytest.fixture(scope="module")
def pipeline(launches) -> Launch:
    pytest.importorskip("torch.distributed.pipelining")

    def go(tmp):
        return h.spawn_traced("pipeline.py", W, tmp, timeout=120, env=h.clean_env(PIPELINE_EVAL="1"))
    return launches("pipeline", go)


def test_pipeline_stage_forwards_are_compute(pipeline):
    pipeline.result.check(0)
    losses = pipeline.rank_json(W - 1)["losses"]
    # (a shape inference's loss, of uninitialized activations, may be anything: steps 2 and 3's)
    assert len(losses) >= STEPS * MICRO and all(math.isfinite(x) for x in losses[-2 * MICRO:])
    spans = h.load(pipeline.run_dir, "spans")
    for r in range(W):
        mine = spans[spans["rank"] == r]
        # Regression: without the module tracker on, a stage's forwards made no compute span
        # (a pipeline step read as all communication).
        fwd = mine[mine["phase"] == "forward"]
        assert set(fwd["module"]) == {f"Sequential[stage{r}]"}, r   # its stage's index (stage r)
        per_step = fwd[fwd["grad"]].groupby("step").size().to_dict()
        # steps 1 and 2 (after the eval()) may add the schedule's shape-inference forward (torch >= 2.6)
        assert per_step[1] >= MICRO and per_step[2] >= MICRO and per_step[3] == MICRO, (r, per_step)
        assert set(mine[mine["phase"] == "optimizer"]["step"]) == {1, 2, 3}, r
    ops = pipeline.frame
    # activations forward (rank 0 -> 1) and gradients back, one micro-batch each: async p2p
    acts = ops[(ops["op"] == "send") & ops["async"] & (ops["bytes"] == 4 * 32 * 2)]
    evaluated = MICRO if pipeline.rank_json(0)["evaluated"] else 0   # eval(): activations only
    assert acts.groupby("rank").size().to_dict() == {0: STEPS * MICRO + evaluated, 1: STEPS * MICRO}


def ops_with_steps(run: Launch):
    """The run's ops with ``step``: the step of their rank they start in (0: none), and the steps."""
    ops, steps = run.frame, h.load(run.run_dir, "steps")
    step = np.zeros(len(ops), np.int64)
    start, rank = ops["t_start_ns"].to_numpy(np.int64), ops["rank"].to_numpy()
    for r, st in steps.sort_values("t_begin_ns").groupby("rank"):
        mine = rank == r
        b, e = st["t_begin_ns"].to_numpy(np.int64), st["t_end_ns"].to_numpy(np.int64)
        k = np.maximum(np.searchsorted(b, start[mine], side="right") - 1, 0)
        inside = (start[mine] >= b[k]) & (start[mine] <= e[k])
        step[mine] = np.where(inside, st["step"].to_numpy()[k], 0)
    return ops.assign(step=step), steps


def by_hand(stages: dict) -> dict:
    """rank -> Counter((op, phase)) per step, from the stage placement (rank -> stage ids): each
    boundary between stages on two ranks carries MICRO activations forward and MICRO gradients
    back; one inside a rank carries nothing."""
    owner = {s: r for r, ids in stages.items() for s in ids}
    per_rank = {r: Counter() for r in stages}
    for s in range(len(owner) - 1):
        a, b = owner[s], owner[s + 1]
        if a != b:
            per_rank[a].update({("send", "forward"): MICRO, ("recv", "backward"): MICRO})
            per_rank[b].update({("recv", "forward"): MICRO, ("send", "backward"): MICRO})
    return per_rank


ACT = 4 * (8 // MICRO) * 32     # one micro-batch of activations or gradients: 2 x 32 float32


def stage_labels(ids) -> set:
    """The module labels of a rank's stages: the class and the stage index (module_tracker)."""
    return {f"Sequential[stage{i}]" for i in ids}


def check_schedule_steps(run: Launch, schedule: str, steps_of: list, stages: dict, setup: int = 1) -> None:
    """Each step of ``schedule`` on each rank: its activation sends and receives counted by hand,
    phase forward or backward, module the stage's (Sequential[stageI], as its forward spans); from the
    schedule's ``setup + 1``-th step on, they are the step's only ops (its first adds the
    schedule's set-up: shape inference, p2p warm-up; a step after an eval() warms up again) and
    the step table's ops and bytes say so."""
    ops, steps = ops_with_steps(run)
    want = by_hand(stages)
    table = steps.set_index(["rank", "step"])
    for r in range(W):
        for k, step in enumerate(steps_of):
            mine = ops[(ops["rank"] == r) & (ops["step"] == step)]
            p2p = mine[mine["op"].isin(["send", "recv"]) & (mine["bytes"] == ACT)]
            got = Counter(zip(p2p["op"].astype(str), p2p["phase"].astype(str)))
            assert got == want[r], (schedule, r, step, got, want[r])
            assert set(p2p["module"].astype(str)) == stage_labels(stages[r]), (schedule, r, step)
            assert p2p["async"].all()
            if k >= setup:
                n = sum(want[r].values())
                assert len(mine) == n, (schedule, r, step, mine[["op", "phase", "bytes", "api"]])
                assert (int(table.loc[(r, step), "ops"]), int(table.loc[(r, step), "bytes"])) == (n, n * ACT), \
                    (schedule, r, step)
    spans = h.load(run.run_dir, "spans")
    # Regression: a stage reading its ops' tensors as it builds them (workers/pipeline.py's
    # CountingStage) labelled the context outside a batch: no forward span opened after it.
    fwd = spans[(spans["phase"] == "forward") & spans["grad"] & spans["step"].isin(steps_of[setup:])]
    # Regression: two stages of one class (rank 0's stages 0 and 2, both Sequential) had one label.
    assert fwd.groupby(["rank", "step", "module"], observed=True).size().to_dict() == {
        (r, s, m): MICRO for r in range(W) for s in steps_of[setup:] for m in stage_labels(stages[r])}, schedule
    bounds = spans[(spans["phase"] == "schedule") & spans["grad"] & spans["step"].isin(steps_of)]
    assert Counter(zip(bounds["rank"], bounds["step"])) == {(r, s): 1 for r in range(W) for s in steps_of}
    assert set(bounds["module"].astype(str)) == {schedule}


def test_gpipe_step_begins_at_schedule_step(pipeline):
    """GPipe, by hand: rank 0 sends 4 activations and receives 4 gradients per step, rank 1 the
    reverse. Regression: rank 1's step began at its first forward, after its first receive, so
    steps 2 and 3 showed 7 ops of 8; the sends and receives had no phase or module. Every op
    but the closing barrier and an eval() between steps 1 and 2 (its 4 activations, phase
    forward) is in a step. Regression: the eval()'s forwards (autograd on) began step 2, and
    its ops were counted in it."""
    pipeline.result.check(0)
    evaluated = pipeline.rank_json(0)["evaluated"]
    check_schedule_steps(pipeline, "ScheduleGPipe", [1, 2, 3], {0: [0], 1: [1]}, setup=1 + evaluated)
    ops, steps = ops_with_steps(pipeline)
    assert sorted(set(steps["step"])) == [1, 2, 3]
    outside = ops[ops["step"] == 0]
    barriers = outside[outside["op"] == "barrier"]
    assert barriers.groupby("rank").size().to_dict() == {0: 1, 1: 1}
    # the eval() between steps 1 and 2: its activations (and its p2p warm-up) between them
    table = steps.set_index(["rank", "step"])
    evaluation = outside[outside["op"] != "barrier"]
    rank = evaluation["rank"].to_numpy()
    assert ((evaluation["t_start_ns"].to_numpy() > table.xs(1, level="step")["t_end_ns"][rank].to_numpy())
            & (evaluation["t_start_ns"].to_numpy() < table.xs(2, level="step")["t_begin_ns"][rank].to_numpy())).all()
    acts = evaluation[evaluation["bytes"] == ACT]
    got = Counter(zip(acts["rank"], acts["op"].astype(str), acts["phase"].astype(str)))
    assert got == ({(0, "send", "forward"): MICRO, (1, "recv", "forward"): MICRO} if evaluated else {}), got
    spans = h.load(pipeline.run_dir, "spans")
    evaluations = spans[(spans["phase"] == "schedule") & ~spans["grad"]]   # eval(): a schedule span, no step
    assert evaluations.groupby("rank").size().to_dict() == ({0: 1, 1: 1} if evaluated else {})


# one run, each schedule on new stages for 3 steps (workers/pipeline.py): rank -> its stages
SCHEDULES = {"Schedule1F1B": {0: [0], 1: [1]},
             "ScheduleInterleaved1F1B": {0: [0, 2], 1: [1, 3]},
             "ScheduleLoopedBFS": {0: [0, 2], 1: [1, 3]},
             "ScheduleInterleavedZeroBubble": {0: [0, 2], 1: [1, 3]},
             "ScheduleZBVZeroBubble": {0: [0, 3], 1: [1, 2]},
             "ScheduleDualPipeV": {0: [0, 3], 1: [1, 2]}}


def test_schedules_p2p_counted_by_hand(tmp_path):
    """1F1B, interleaved 1F1B, looped BFS and the zero-bubble ones this torch has, 2 ranks,
    4 micro-batches. By hand (by_hand), per step: 1F1B as GPipe; interleaved 1F1B, looped BFS
    and interleaved zero bubble (rank 0: stages 0 and 2, rank 1: 1 and 3): each of the 3
    boundaries joins the two ranks, so rank 0 sends 8 activations and 4 gradients and receives 4
    and 8, rank 1 the reverse; ZBV and DualPipeV (a V: rank 0 holds stages 0 and 3, rank 1 1 and
    2, whose boundary stays in the rank): 4 of each on both ranks. Regression: a later stage's
    steps showed one receive less (23 of 24 ops, interleaved) and no op had a phase or module."""
    pytest.importorskip("torch.distributed.pipelining")
    run = h.spawn_traced("pipeline.py", W, tmp_path, timeout=240,
                         env=h.clean_env(PIPELINE_SCHEDULE=",".join(SCHEDULES)))
    run.result.check(0)
    ran = run.rank_json(0)["schedules"]
    assert "Schedule1F1B" in ran and set(ran) <= set(SCHEDULES), ran
    for k, name in enumerate(ran):
        check_schedule_steps(run, name, [STEPS * k + 1 + i for i in range(STEPS)], SCHEDULES[name])
    ops, _ = ops_with_steps(run)
    assert set(ops[ops["step"] == 0]["op"]) == {"barrier"}


def test_schedule_span_bounds_the_step_but_is_no_compute(tmp_path):
    """Constructed trace (µs): a schedule's step() [0, 100] posts a receive at 5 that ends at 40,
    then its stage runs forward [40, 60] and backward [60, 80]; optimizer [100, 110]. The step is
    [0, 110] with the receive in it; compute is the spans' [40, 80] + [100, 110] = 50, not the
    step() call's 100 (its bubble is the receive's exposed 35). An eval() step() [200, 220]
    (no grad) begins no step: its op is between steps, and step 2 begins at its own step() (300)."""
    from commtrace.analysis.partitioned import analyse
    from commtrace.analysis.window import Window
    from tracebuilder import Proc, write_run
    us = 1000
    p = Proc(0, world_size=1)
    p.span("schedule", 0, 100, 1, module="ScheduleGPipe").op("recv", 5, 40, phase="forward", module="Sequential")
    p.span("forward", 40, 60, 1, module="Sequential").span("backward", 60, 80, 1).span("optimizer", 100, 110, 1)
    p.span("schedule", 200, 220, 2, module="ScheduleGPipe", grad=False).op("recv", 205, 210, phase="forward")
    p.span("forward", 210, 215, 2, module="Sequential", grad=False)
    p.span("schedule", 300, 350, 2, module="ScheduleGPipe").span("forward", 310, 320, 2, module="Sequential")
    p.span("optimizer", 350, 360, 2)
    rep = analyse(write_run(tmp_path / "run", [p], end_us=400), window=Window.from_args(), op_view=True)
    per = rep.steps.per_rank.set_index("step")
    assert list(per.index) == [1, 2]
    assert (per.loc[1, "step_ns"], per.loc[1, "ops"], per.loc[1, "compute_ns"]) == (110 * us, 1, 50 * us)
    assert (per.loc[1, "comm_ns"], per.loc[1, "exposed_ns"]) == (35 * us, 35 * us)
    assert (per.loc[2, "step_ns"], per.loc[2, "ops"], per.loc[2, "compute_ns"]) == (60 * us, 0, 20 * us)
    assert rep.steps.outside.loc["between steps", "ops"] == 1
    assert "schedule" not in set(rep.op_view.spans["phase"].astype(str))   # the timeline's compute lanes
