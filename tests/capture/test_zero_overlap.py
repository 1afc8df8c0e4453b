"""ZeroRedundancyOptimizer(overlap_with_ddp=True): the optimizer steps inside DDP's comm hook.

workers/zero_overlap.py, 2 ranks under mpirun on the mpi backend (torch refuses the
overlap on gloo), traced: 5 iterations under hook_with_zero_step, then 4 under
hook_with_zero_step_interleaved, no ``step()`` call. Counted by hand (float32):

* each model: 6 x Linear(16, 16) = 12 parameters, 1632 floats = 6528 B;
  construction: all_gather (8 B), shape broadcast (36 int64 = 288 B), state broadcast (6528 B);
* iteration 1: one bucket, all 6528 B (DDP's first bucketing);
* iteration 2: the rebuild broadcasts (12 indices + 1 = 52 B, 3 sizes = 12 B), then the
  buckets under the 2200-byte cap in gradient order: [5.bias, 5.weight, 4.bias, 4.weight,
  3.bias] = 2240 B, [3.weight, 2.bias, 2.weight, 1.bias, 1.weight] = 3200 B,
  [0.bias, 0.weight] = 1088 B. The hook only learns the buckets here: no ZeRO step;
* from iteration 3: the buckets' all_reduces (phase backward, buckets 0-2), and ZeRO's step
  -- a local step on the buckets its rank owns (0 and 2 on rank 0, 1 on rank 1) and one
  broadcast per bucket from its owner (2240 B from 0, 3200 B from 1, 1088 B from 0) --
  phase optimizer, no module, no bucket; it ends when the hook has waited for them.

Steps: the functional optimizer ZeRO steps with fires no torch.optim hook; without
commtrace knowing the hook, the run had no step at all and the broadcasts were the
backward's. With it, iterations 1-3 are step 1 (3 micro-steps: the first two updated no
parameter, as a GradScaler-skipped step), then one step per iteration.
"""
from __future__ import annotations

import pandas as pd
import pytest

import helpers as h

WORLD = 2
BUCKETS = (2240, 3200, 1088)
OWNER = (0, 1, 0)


def _grad(nbytes, bucket, module):
    return ("all_reduce", "backward", module, bucket, nbytes, None)


def _zero_step():
    return [("broadcast", "optimizer", None, None, n, root) for n, root in zip(BUCKETS, OWNER)]


def _model(module, iterations):
    """Each of the model's steps, its ops as (op, phase, module, bucket, bytes, broadcast root)."""
    buckets = [_grad(n, b, module) for b, n in enumerate(BUCKETS)]
    first = [_grad(6528, 0, module),
             ("broadcast", "forward", module, None, 52, 0), ("broadcast", "forward", module, None, 12, 0),
             *buckets, *buckets, *_zero_step()]
    return [first] + [buckets + _zero_step()] * (iterations - 3)


EXPECTED = _model("Sequential", 5) + _model("Sequential#2", 4)
MICRO = [3, 1, 1, 3, 1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zero_overlap")
    res = h.run(h.mpirun_cmd(WORLD, h.PY, "-m", "commtrace", "run", "-o", tmp / "run", h.worker("zero_overlap.py")),
                env=h.mpi_env(), timeout=150)
    if res.returncode and "currently requires NCCL" in res.stderr:   # torch < 2.6 (2.4.1: refuses it)
        pytest.skip("this torch refuses ZeroRedundancyOptimizer's DDP overlap on the mpi backend")
    res.check(0)
    return h.Launch(res, tmp / "run")


def _na(v):
    return None if pd.isna(v) else v


@pytest.mark.parametrize("rank", range(WORLD))
def test_every_op_of_every_step(run, rank):
    df, steps = run.frame, h.load(run.run_dir, "steps")
    df, steps = df[df["rank"] == rank], steps[steps["rank"] == rank]
    assert list(steps["step"]) == list(range(1, len(EXPECTED) + 1))
    assert list(steps["micro_steps"]) == MICRO
    for s, want in zip(steps.itertuples(), EXPECTED):
        rows = df[(df["t_start_ns"] >= s.t_begin_ns) & (df["t_start_ns"] <= s.t_end_ns)]
        got = [(r.op, _na(r.phase), _na(r.module), _na(r.bucket), int(r.bytes),
                None if r.op != "broadcast" or pd.isna(r.root) else int(r.root)) for r in rows.itertuples()]
        assert sorted(got, key=repr) == sorted(want, key=repr), f"step {s.step}"
        assert (s.ops, s.bytes) == (len(want), sum(op[4] for op in want)), f"step {s.step}"
    # outside every step: only the two constructions (3 ops each)
    inside = df["t_start_ns"].apply(lambda t: ((steps["t_begin_ns"] <= t) & (t <= steps["t_end_ns"])).any())
    assert list(df[~inside]["phase"]) == ["ddp_init"] * 6


def test_a_step_span_per_zero_step(run):
    spans = h.load(run.run_dir, "spans")
    zero = spans[(spans["phase"] == "optimizer")]
    assert set(zero["module"].astype(str)) == {"ZeroRedundancyOptimizer"}  # the label column
    assert sorted(zero.groupby("rank")["step"].apply(list).items()) == [(r, [1, 2, 3, 4, 5]) for r in range(WORLD)]


def test_report_counts_the_same_steps(run, tmp_path):
    import json
    out = tmp_path / "r.json"
    h.commtrace_main("report", run.run_dir, "--json", str(out), "-q")
    rep = json.loads(out.read_text())
    assert [s["micro_steps"] for s in rep["steps"]] == MICRO
    assert [s["ops"] for s in rep["steps"]] == [len(ops) for ops in EXPECTED]
