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
