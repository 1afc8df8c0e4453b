"""Training loops as users write them (train_loops.py), traced on 2 gloo ranks: the same
stdout as untraced, and every op of each rank where it belongs, counted by hand.

(phase, detail, module, bytes, bucket) per op; float32 = 4 B, int64 = 8 B.

* validation (BNNet: 244 floats = 976 B of gradients, one bucket; buffers running_mean
  and running_var (128 B, one coalesced broadcast) and num_batches_tracked (8 B)):
  DDP broadcasts the buffers in a forward only if the forward before it ran with
  gradients (``require_forward_param_sync``): steps 1, 2 and 4 and the first validation
  forward after steps 2 and 4 do; step 3 (after no_grad forwards) and the other
  validation forwards (rank 1 runs one more: no op, so no hang) do not. The rebuild
  at step 2 broadcasts 6 parameter indices + 1 count (28 B) and one bucket size (4 B).
  Between steps: the program's metrics (all_reduce 8 B, all_gather of the sizes 8 B
  and of the padded predictions 12 int64 = 96 B, all_gather_object's 8 B size and
  31 B pickle, the early-stopping flag broadcast 8 B): no phase and no module (they
  used to carry BNNet, the module of the last evaluation forward).
* gan: two optimizers, one DDP model each: a D step (D's 36 B bucket) then a G step
  (the generator's loss runs backward through D: D's bucket, then G's 160 B): 2 steps
  per iteration, each bucket numbered within its model. D's rebuild (2 indices + 1
  count = 12 B, one size 4 B) comes with its second forward (G step 1), G's with its
  second (D step 2).
* checkpoint_reentrant / checkpoint: DDP(static_graph) over two activation-checkpointed
  Linear(8, 8) (576 B, one bucket); iteration 1 all_reduces the used map (4
  parameters: 4 int32 = 16 B), the rebuild at iteration 3 (4 indices + 1 count, 1 size).
  Reentrant checkpointing runs a backward pass inside the backward pass: its buckets
  used to lose their module and bucket number when that inner pass ended.
* amp: GradScaler skips the first optimizer.step() (inf gradients): the first two
  iterations are one step of 2 micro-steps (docs/report.md, Step).
* backward_collective: a custom autograd Function all_reduces its input's gradient
  (blocking, 256 B) inside DDP's backward, before DDP's buckets: it is the program's op,
  no bucket. It used to be counted as bucket 0, every real bucket numbered one on, the
  last one shown with no parameters. It then all_reduces the gradient's norm with
  async_op=True (4 B): the program's op too, no bucket (DDP's reducer issues its buckets
  from C++; this one was counted as a bucket as well).
"""
import os

import pandas as pd
import pytest

import commtrace
import helpers as h

from .conftest import HERE

WORLD = 2
SCRIPT = os.path.join(HERE, "train_loops.py")


def fwd(detail, module, nbytes):
    return ("forward", detail, module, nbytes, None)


def grad(module, nbytes, bucket=0):
    return ("backward", None, module, nbytes, bucket)


def buffers():
    return [fwd("buffers", "BNNet", 128), fwd("buffers", "BNNet", 8)]


def rebuild(module, indices, buckets=1):
    """DDP's bucket rebuild: the parameter indices + their count, then one size per bucket (int32)."""
    return [fwd("bucket_rebuild", module, 4 * indices), fwd("bucket_rebuild", module, 4 * buckets)]


METRICS = [*buffers(), (None, None, None, 8, None), (None, None, None, 8, None), (None, None, None, 96, None),
           (None, "object_sizes", None, 8, None), (None, "object_payload", None, 31, None),
           (None, None, None, 8, None)]
REGION = ("backward", None, "RegionNet", 256, None)   # the autograd Function's all_reduce
NORM = ("backward", None, "RegionNet", 4, None)   # and its async one: the program's, no bucket
USED_MAP = ("backward", None, None, 16, None)   # module filled per model below


def static(module):
    used = (*USED_MAP[:2], module, *USED_MAP[3:])
    return [[used, grad(module, 576)], [grad(module, 576)], [*rebuild(module, 5), grad(module, 576)],
            [grad(module, 576)]]


# Per step: (ops in the step, ops after it before the next step)
EXPECTED = [
    ([*buffers(), grad("BNNet", 976)], []),
    ([*rebuild("BNNet", 7), *buffers(), grad("BNNet", 976)], METRICS),
    ([grad("BNNet", 976)], []),
    ([*buffers(), grad("BNNet", 976)], METRICS),
    *[(ops, []) for ops in [
        [grad("Discriminator", 36)],
        [*rebuild("Discriminator", 3), grad("Discriminator", 36), grad("Generator", 160)],
        [*rebuild("Generator", 3), grad("Discriminator", 36)],
        [grad("Discriminator", 36), grad("Generator", 160)],
        [grad("Discriminator", 36)],
        [grad("Discriminator", 36), grad("Generator", 160)],
        *static("Checkpointed"), *static("Checkpointed#2"),
        [grad("Linear", 144), *rebuild("Linear", 3), grad("Linear", 144)],
        [grad("Linear", 144)], [grad("Linear", 144)],
        [REGION, NORM, grad("RegionNet", 848)],
        [*rebuild("RegionNet", 5, 2), REGION, NORM, grad("RegionNet", 336), grad("RegionNet", 512, 1)],
        [REGION, NORM, grad("RegionNet", 336), grad("RegionNet", 512, 1)]][:-1]],
    ([REGION, NORM, grad("RegionNet", 336), grad("RegionNet", 512, 1)], [(None, None, None, 0, None)]),  # + the barrier
]
MICRO_STEPS = {19: 2}


@pytest.fixture(scope="module")
def loops(tmp_path_factory):
    """(untraced result, traced result, run directory), launched at once."""
    tmp = tmp_path_factory.mktemp("loops")
    out = str(tmp / "run")
    plain, traced = h.concurrently(
        lambda: h.run([h.PY, SCRIPT, h.free_port()], timeout=180).check(),
        lambda: h.run([h.PY, "-m", "commtrace", "run", "-o", out, SCRIPT, h.free_port()], timeout=180).check())
    return plain, traced, out


def _value(v):
    return None if pd.isna(v) else v


def _ops_around_steps(run, rank):
    """Per step of ``rank``: (its ops, the ops after it before the next step), each sorted."""
    df = commtrace.load(run)
    df = df[(df["rank"] == rank) & (df["phase"].astype(str) != "ddp_init")].sort_values("t_start_ns")
    steps = commtrace.load(run, table="steps")
    steps = steps[steps["rank"] == rank].sort_values("t_begin_ns")
    begins, ends = steps["t_begin_ns"].tolist(), steps["t_end_ns"].tolist()
    out = [([], []) for _ in begins]
    for r in df.itertuples():
        op = (_value(r.phase), _value(r.detail), _value(r.module), int(r.bytes),
              None if pd.isna(r.bucket) else int(r.bucket))
        i = sum(b <= r.t_start_ns for b in begins) - 1
        assert i >= 0, f"an op before the first step: {op}"
        out[i][r.t_start_ns > ends[i]].append(op)
    return [(sorted(a, key=repr), sorted(b, key=repr)) for a, b in out], steps["micro_steps"].tolist()


def test_traced_output_is_untraced_output(loops):
    plain, traced, _ = loops
    assert traced.stdout == plain.stdout
    assert plain.stdout.count("\n") == 6 + 3 + 8 + 4 + 3   # validation stopped early after step 4


@pytest.mark.parametrize("rank", range(WORLD))
def test_every_op_where_it_belongs(loops, rank):
    got, micro = _ops_around_steps(loops[2], rank)
    assert len(got) == len(EXPECTED)
    for step, (have, (inside, after)) in enumerate(zip(got, EXPECTED), start=1):
        assert have == (sorted(inside, key=repr), sorted(after, key=repr)), f"step {step}"
    assert micro == [MICRO_STEPS.get(s, 1) for s in range(1, len(EXPECTED) + 1)]
