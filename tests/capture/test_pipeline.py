"""A pipeline-parallel schedule (torch.distributed.pipelining, GPipe) on 2 spawned gloo ranks:
its stages run plain modules, whose forwards are the ranks' compute."""
from __future__ import annotations

import math

import pytest

import helpers as h
from helpers import Launch

W, STEPS, MICRO = 2, 3, 4  # as workers/pipeline.py


@pytest.fixture(scope="module")
def pipeline(launches) -> Launch:
    pytest.importorskip("torch.distributed.pipelining")

    def go(tmp):
        return h.spawn_traced("pipeline.py", W, tmp, timeout=120)
    return launches("pipeline", go)


def test_pipeline_stage_forwards_are_compute(pipeline):
    pipeline.result.check(0)
    losses = pipeline.rank_json(W - 1)["losses"]
    assert len(losses) >= STEPS * MICRO and all(math.isfinite(x) for x in losses[-STEPS * MICRO:])
    spans = h.load(pipeline.run_dir, "spans")
    for r in range(W):
        mine = spans[spans["rank"] == r]
        # Regression: without the module tracker on, a stage's forwards made no compute span
        # (a pipeline step read as all communication).
        fwd = mine[mine["phase"] == "forward"]
        assert set(fwd["module"]) == {"Sequential"}, r
        per_step = fwd.groupby("step").size().to_dict()
        # step 1 may add the schedule's shape-inference forward (torch >= 2.6)
        assert per_step[1] >= MICRO and {s: per_step[s] for s in (2, 3)} == {2: MICRO, 3: MICRO}, (r, per_step)
        assert set(mine[mine["phase"] == "optimizer"]["step"]) == {1, 2, 3}, r
    ops = pipeline.frame
    # activations forward (rank 0 -> 1) and gradients back, one micro-batch each: async p2p
    acts = ops[(ops["op"] == "send") & ops["async"] & (ops["bytes"] == 4 * 32 * 2)]
    assert acts.groupby("rank").size().to_dict() == {0: STEPS * MICRO, 1: STEPS * MICRO}


def test_interleaved_schedule_p2p_counted_by_hand(tmp_path):
    """ScheduleInterleaved1F1B, 2 ranks x 2 stages (rank 0: stages 0 and 2, rank 1: 1 and 3),
    4 micro-batches. By hand, per step: each of the 3 stage boundaries carries 4 activations
    forward and 4 gradients back, and every boundary joins the two ranks, so each rank sends
    and receives 12 micro-batches of 2 x 32 floats (256 bytes), all to and from the other rank.
    A later stage's step begins at its first forward (docs/report.md): rank 1's first receive
    of steps 2 and 3 is between steps, so its step table shows 23 of them; rank 0 starts steps
    with a forward (stage 0) and shows all 24."""
    pipelining = pytest.importorskip("torch.distributed.pipelining")
    if not hasattr(pipelining, "ScheduleInterleaved1F1B"):
        pytest.skip("this torch has no ScheduleInterleaved1F1B")
    run = h.spawn_traced("pipeline.py", W, tmp_path, timeout=180,
                         env=h.clean_env(PIPELINE_SCHEDULE="ScheduleInterleaved1F1B"))
    run.result.check(0)
    ops = run.frame
    acts = ops[(ops["op"].isin(["send", "recv"])) & ops["async"] & (ops["bytes"] == 4 * 32 * 2)]
    got = {(int(r), str(o)): int(n) for (r, o), n in acts.groupby(["rank", "op"], observed=True).size().items()}
    assert got == {(r, o): 12 * STEPS for r in range(W) for o in ("send", "recv")}, got
    assert all(int(p) == 1 - int(r) for r, p in zip(acts["rank"], acts["root"]))
    steps = h.load(run.run_dir, "steps")
    later = steps[(steps["step"] > 1)].set_index(["rank", "step"])["ops"].to_dict()
    assert later == {(0, 2): 24, (0, 3): 24, (1, 2): 23, (1, 3): 23}, later
