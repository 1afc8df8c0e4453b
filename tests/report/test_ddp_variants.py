"""The report's DDP figures under comm hooks and training-loop variants, counted by hand.

One real traced 2-rank gloo run (ddp_variants.py) runs every variant one after
another; steps are numbered over the whole process. Per step, every op of each
rank is checked: phase, DDP detail, module, process group size, bytes and
bucket number; and per step the step table's ops, bytes and micro-steps.

How the hand counts come about (float32 = 4 bytes, int32 = 4 bytes):

* Net has fc1 (weight 16x8 = 128 floats, bias 16) and fc2 (weight 4x16 = 64,
  bias 4): 212 floats = 848 B. DDP's first iteration puts every parameter in one
  bucket (no find_unused_parameters: unbounded first bucketing); at the start
  of iteration 2 it rebuilds them in gradient-ready order under the 300-byte cap:
  [fc2.bias, fc2.weight, fc1.bias] = 336 B (closed once it reaches the cap) and
  [fc1.weight] = 512 B. The rebuild broadcasts the bucket indices (4 parameters
  + 1 count = 20 B) and the bucket sizes (4 B per bucket: 8 B for two).
* fp16_compress_hook all_reduces float16 buffers: half the bytes.
* PowerSGD (rank 1, one bucket of 848 B, start_powerSGD_iter=2): steps 1 and 2
  are plain all_reduces; from step 3 each bucket sends three all_reduces, all
  of bucket 0: the 1-D tensors uncompressed (fc2.bias + fc1.bias = 20 floats =
  80 B), P (rows: 4 + 16 = 20 floats = 80 B) and Q (columns: 16 + 8 = 24 floats
  = 96 B); the last two are issued in Future callbacks.
* post-local SGD (start_localSGD_iter=2, subgroups of 1 rank) with
  PeriodicModelAverager(period=2, warmup_steps=2) in PostLocalSGDOptimizer:
  steps 1-2 all_reduce gradients in the world, later steps in the 1-rank
  subgroup; averaging calls 3 and 5 all_reduce all parameters (848 B, world) in
  the optimizer phase.
* Gradient accumulation, 3 micro-steps (2 under no_sync): one step per
  optimizer step, its gradients all_reduced once.
* Two DDP models in one backward: Net and Linear(8, 4) (32 + 4 floats = 144 B,
  one bucket, its rebuild broadcasts 2 + 1 ints = 12 B and 4 B); each bucket
  carries its own module and is numbered within it.
* static_graph: iteration 1 all_reduces the int32 map of used parameters (4
  parameters = 16 B, no bucket) and the gradients in one bucket; DDP rebuilds
  the buckets at the start of iteration 3 (5 steps: DDP's logging data shows
  the rebuilt layout from iteration 4, so ``params`` is known).
* find_unused_parameters, a head used every other step: Branches has a and b
  (Linear(8, 4) each: 144 B). Buckets are assigned at construction under the
  150-byte cap in parameter order, [a.weight, a.bias, b.weight] = 272 B closed
  at the cap and [b.bias] = 16 B, then launched in reverse: bucket 0 = 16 B,
  bucket 1 = 272 B; every step also all_reduces the int32 used map (16 B). No
  rebuild with find_unused_parameters.
* ZeroRedundancyOptimizer (SGD) over a DDP Net: it places parameters largest
  first on the rank holding the fewest elements so far (fc1.weight on rank 0;
  fc2.weight, fc1.bias, fc2.bias on rank 1) and, after each local step,
  broadcasts every parameter from its owner, one broadcast per parameter (512,
  256, 64 and 16 B) in the optimizer phase, outside every module.
* Many buckets: Sequential of six Linear(16, 16) (12 parameters, 272 floats = 1088 B per
  layer, 6528 B), static_graph, gradient_as_bucket_view, a 1100-byte cap: iteration 1 the
  used map (12 int32 = 48 B) and one bucket; the rebuild at iteration 3 (13 + 4 ints) makes,
  in gradient order, [5.bias, 5.weight, 4.bias] = 1152 B, [4.weight, 3.bias, 3.weight] =
  2112 B, and the same for layers 2-0: DDP's own rebuilt_bucket_sizes.
* DDP given ``device_mesh=`` (1-D, the world): as a plain Net. Its DeviceMesh turns on
  module tracking, which took the DDP wrapper for a module of its own: the buckets were
  module ``DistributedDataParallel``, without ``params``.
"""
import os
import subprocess
import sys

import pandas as pd
import pytest

import commtrace
import helpers as h

from .conftest import HERE, cli

WORLD = 2


def grad(module, nbytes, bucket, group=WORLD):
    return ("backward", None, module, group, nbytes, bucket)


def rebuild(module, nbytes):
    return ("forward", "bucket_rebuild", module, WORLD, nbytes, None)


def used_map(module, nbytes):
    return ("backward", None, module, WORLD, nbytes, None)


def averaging(nbytes):
    return ("optimizer", None, None, WORLD, nbytes, None)


def zero_broadcasts():
    return [("optimizer", None, None, WORLD, nbytes, None) for nbytes in (512, 256, 64, 16)]


def two_buckets(module, group=WORLD):
    return [grad(module, 336, 0, group), grad(module, 512, 1, group)]


def first_steps(module):
    """Steps 1 and 2 of a fresh Net with plain all_reduces: one bucket, then the rebuild."""
    return [[grad(module, 848, 0)],
            [rebuild(module, 20), rebuild(module, 8), *two_buckets(module)]]


MANY_BUCKETS = [grad("Sequential", n, b) for b, n in enumerate((1152, 2112, 1152, 2112))]
POWERSGD_STEP = [grad("Net#3", 80, 0), grad("Net#3", 80, 0), grad("Net#3", 96, 0)]

# Step number (1 = the process's first optimizer step) -> every op of a rank in it.
EXPECTED = [
    # allreduce_hook, 3 steps
    *first_steps("Net"), two_buckets("Net"),
    # fp16_compress_hook, 2 steps
    [grad("Net#2", 424, 0)],
    [rebuild("Net#2", 20), rebuild("Net#2", 8), grad("Net#2", 168, 0), grad("Net#2", 256, 1)],
    # PowerSGD, 4 steps: compression from step 3 (of its own)
    [grad("Net#3", 848, 0)],
    [rebuild("Net#3", 20), rebuild("Net#3", 4), grad("Net#3", 848, 0)],
    POWERSGD_STEP, POWERSGD_STEP,
    # post-local SGD, 5 steps
    *first_steps("Net#4"),
    [*two_buckets("Net#4", 1), averaging(848)],
    two_buckets("Net#4", 1),
    [*two_buckets("Net#4", 1), averaging(848)],
    # accumulation, 2 steps of 3 micro-steps
    *first_steps("Net#5"),
    # two DDP models
    [grad("Net#6", 848, 0), grad("Linear", 144, 0)],
    [rebuild("Net#6", 20), rebuild("Net#6", 8), rebuild("Linear", 12), rebuild("Linear", 4),
     grad("Linear", 144, 0), *two_buckets("Net#6")],
    # static_graph, 5 steps
    [used_map("Net#7", 16), grad("Net#7", 848, 0)],
    [grad("Net#7", 848, 0)],
    [rebuild("Net#7", 20), rebuild("Net#7", 8), *two_buckets("Net#7")],
    two_buckets("Net#7"), two_buckets("Net#7"),
    # find_unused_parameters, 3 steps
    *[[grad("Branches", 16, 0), grad("Branches", 272, 1), used_map("Branches", 16)]] * 3,
    # ZeroRedundancyOptimizer, 3 steps
    *[[*ops, *zero_broadcasts()] for ops in [*first_steps("Net#8"), two_buckets("Net#8")]],
    # many buckets (static graph, gradients as bucket views), 4 steps
    [used_map("Sequential", 48), grad("Sequential", 6528, 0)], [grad("Sequential", 6528, 0)],
    [rebuild("Sequential", 52), rebuild("Sequential", 16), *MANY_BUCKETS],
    MANY_BUCKETS,
    # DDP(device_mesh=) (a 1-D mesh over the world: its default group), 3 steps
    *first_steps("Net#9"), two_buckets("Net#9"),
]
MICRO_STEPS = {15: 3, 16: 3}  # the accumulation steps


@pytest.fixture(scope="module")
def variants_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("variants") / "run")
    proc = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", out,
                           os.path.join(HERE, "ddp_variants.py"), str(h.free_port())],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, "stdout.txt"), "w") as f:
        f.write(proc.stdout)
    return out


@pytest.fixture(scope="module")
def report(variants_run, tmp_path_factory):
    import json
    js = tmp_path_factory.mktemp("variants_json") / "r.json"
    assert cli("report", variants_run, "--json", js, "-q") == 0
    return json.loads(js.read_text())


def _value(v):
    return None if pd.isna(v) else v


def _ops_by_step(run, report, rank):
    """Each op of ``rank`` as (phase, detail, module, group size, bytes, bucket), by the step it starts in."""
    df = commtrace.load(run)
    df = df[df["rank"] == rank]
    out = {}
    for s in report["steps_per_rank"]:
        if s["rank"] != rank:
            continue
        rows = df[(df["t_start_ns"] >= s["t_begin_ns"]) & (df["t_start_ns"] <= s["t_end_ns"])]
        out[s["step"]] = sorted(
            ((_value(r.phase), _value(r.detail), _value(r.module), int(r.group_size), int(r.bytes),
              None if pd.isna(r.bucket) else int(r.bucket)) for r in rows.itertuples()),
            key=repr)
    return out


@pytest.mark.parametrize("rank", range(WORLD))
def test_every_op_of_every_step(variants_run, report, rank):
    got = _ops_by_step(variants_run, report, rank)
    assert sorted(got) == list(range(1, len(EXPECTED) + 1))
    for step, ops in enumerate(EXPECTED, start=1):
        assert got[step] == sorted(ops, key=repr), f"step {step}"


def test_step_table(report):
    steps = report["steps"]
    assert [s["step"] for s in steps] == list(range(1, len(EXPECTED) + 1))
    for s, ops in zip(steps, EXPECTED):
        assert s["ranks"] == WORLD
        assert s["micro_steps"] == MICRO_STEPS.get(s["step"], 1), s["step"]
        assert s["ops"] == len(ops), s["step"]
        assert s["bytes"] == sum(op[4] for op in ops), s["step"]


def test_construction_ops_are_in_no_iteration(variants_run):
    """Each variant builds a new DDP module after the last one trained: its
    construction's ops (the parameter checks, the module state broadcast) belong to
    no training step, not to the previous module's last one."""
    df = commtrace.load(variants_run)
    init = df[df["phase"] == "ddp_init"]
    assert len(init) == WORLD * 3 * 12  # 3 ops for each of the 12 DDP modules
    assert set(init["iteration"]) == {0}


def test_powersgd_ops_issued_in_callbacks_keep_their_bucket(variants_run):
    """PowerSGD's P and Q all_reduces run in Future callbacks (gloo's thread, or
    inline when the future is already done): they still carry bucket 0, the
    backward phase and the module."""
    df = commtrace.load(variants_run)
    psgd = df[(df["region"] == "powersgd") & (df["op"] == "all_reduce")]
    assert len(psgd) == WORLD * (1 + 1 + 3 + 3)
    assert set(psgd["bucket"].dropna().astype(int)) == {0}
    assert psgd["bucket"].notna().all()
    assert set(psgd["phase"].astype(str)) == {"backward"}
    assert set(psgd["module"].astype(str)) == {"Net#3"}


PARAM_BYTES = {"fc1.weight": 512, "fc1.bias": 64, "fc2.weight": 256, "fc2.bias": 16,
               "weight": 128, "bias": 16, "a.weight": 128, "a.bias": 16, "b.weight": 128, "b.bias": 16}


def test_bucket_params_follow_the_layout_in_force(variants_run):
    """``params`` names the parameters of each gradient bucket, from the layout
    DDP had when the bucket ran: before the rebuild every parameter (one bucket),
    after it the rebuilt buckets -- the rebuild comes at the fourth forward with
    3 micro-steps per step and at the third with static_graph. Without a
    compressing hook a bucket's bytes are its parameters' bytes."""
    df = commtrace.load(variants_run)
    plain = df[df["bucket"].notna() & df["region"].isin(
        ["allreduce_hook", "post_localsgd", "accumulation", "two_models", "static_graph", "find_unused",
         "device_mesh"])]
    assert len(plain) > 0
    for r in plain.itertuples():
        if isinstance(r.params, str):
            assert sum(PARAM_BYTES[p] for p in r.params.split(",")) == r.bytes, (r.region, r.iteration, r.params)
    # DDP's logging data shows a rebuilt layout a sampled forward after the rebuild:
    # a model that stops right after it (two_models: 2 steps) has it unknown, and
    # the first layout no longer applies -- unless its gradients fit DDP's first
    # bucket (the Linear: 144 B), whose one bucket every layout keeps;
    # find_unused_parameters starts with two buckets, a layout DDP does not report.
    two = plain[(plain["region"] == "two_models") & (plain["iteration"] == 2)]
    linear = two[two["module"] == "Linear"]
    assert len(linear) == WORLD and set(linear["params"]) == {"bias,weight"}
    unknown = pd.concat([two.drop(linear.index), plain[plain["region"] == "find_unused"]])
    assert len(unknown) == WORLD * (2 + 3 * 2) and unknown["params"].isna().all()
    assert plain.drop(unknown.index)["params"].notna().all()
    every = "fc2.bias,fc2.weight,fc1.bias,fc1.weight"
    for region, iterations in (("static_graph", (1, 2)), ("accumulation", (3,))):
        rows = plain[(plain["region"] == region) & plain["iteration"].isin(iterations)]
        assert set(rows["params"].astype(str)) == {every}, region
    for region, iteration in (("static_graph", 3), ("accumulation", 6)):
        rows = plain[(plain["region"] == region) & (plain["iteration"] == iteration)]
        assert sorted(zip(rows["bucket"].astype(int), rows["params"].astype(str))) == [
            (0, "fc2.bias,fc2.weight,fc1.bias")] * WORLD + [(1, "fc1.weight")] * WORLD, region


def test_python_wrapper_records_the_same_buckets_and_modules(tmp_path):
    """The Python wrapper (COMMTRACE_NATIVE=0) reads the same per-thread context:
    PowerSGD's callback ops keep bucket 0, two models keep their own modules."""
    out = str(tmp_path / "run")
    env = {**os.environ, "COMMTRACE_NATIVE": "0"}
    proc = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", out, os.path.join(HERE, "ddp_variants.py"),
                           str(h.free_port()), "powersgd,two_models"], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = commtrace.load(out)
    grads = df[df["bucket"].notna()]
    assert set(grads.groupby(["region", "module", "iteration"], observed=True)["bucket"].apply(
        lambda b: tuple(sorted(b.astype(int)))).items()) == {
        # module labels: this run's own (Net first, then Net#2 and Linear); per (region, module, iteration), both ranks
        (("powersgd", "Net", 1), (0, 0)), (("powersgd", "Net", 2), (0, 0)),
        (("powersgd", "Net", 3), (0,) * 6), (("powersgd", "Net", 4), (0,) * 6),
        (("two_models", "Net#2", 1), (0, 0)), (("two_models", "Linear", 1), (0, 0)),
        (("two_models", "Net#2", 2), (0, 0, 1, 1)), (("two_models", "Linear", 2), (0, 0))}
    import glob
    import json
    groups = [json.loads(line) for f in glob.glob(os.path.join(out, "rank*.meta.jsonl")) for line in open(f)]
    assert {g.get("wrapper") for g in groups if g.get("type") == "group"} == {"python"}


def test_many_buckets_match_ddps_own_sizes(variants_run):
    """Rebuilt buckets: each all_reduce's bytes are DDP's own bucket size (its logging
    data's rebuilt_bucket_sizes), in launch order, and its params that bucket's parameters."""
    printed = open(os.path.join(variants_run, "stdout.txt")).read()
    sizes = [int(n) for n in printed.split("many_buckets rebuilt_bucket_sizes ")[1].splitlines()[0].split(",")]
    assert sizes == [1152, 2112, 1152, 2112]
    df = commtrace.load(variants_run)
    rows = df[(df["region"] == "many_buckets") & df["bucket"].notna() & (df["iteration"] >= 3)]
    for rank in range(WORLD):
        for it in (3, 4):
            mine = rows[(rows["rank"] == rank) & (rows["iteration"] == it)].sort_values("bucket")
            assert list(mine["bytes"]) == sizes and list(mine["bucket"].astype(int)) == [0, 1, 2, 3]
            assert list(mine["params"]) == ["5.bias,5.weight,4.bias", "4.weight,3.bias,3.weight",
                                            "2.bias,2.weight,1.bias", "1.weight,0.bias,0.weight"]


def test_by_bucket_and_params_in_partitions_equal_the_frame(variants_run):
    """--by bucket / params over every variant (comm hooks naming their bucket, rebuilt layouts, two models,
    accumulation): held whole and in partitions of a few seqs each (its rank tasks number each process's
    buckets), the table is the one frame's (oracle.op_summary of every op)."""
    from commtrace.analysis.partitioned import analyse
    from oracle import op_summary
    v = analyse(variants_run, op_view=True).op_view
    for by in (["region", "bucket", "params"], ["op", "bucket", "iteration"], ["params"]):
        one_frame = op_summary(v.frame, v.matched, by, v.arrays)
        assert len(one_frame) > 1, by
        for s in (analyse(variants_run, compare_by=by),
                  analyse(variants_run, workers=1, memory_limit=1 << 20, compare_by=by)):
            pd.testing.assert_frame_equal(s.summary(by), one_frame, check_dtype=False, check_index_type=False,
                                          obj=f"--by {','.join(by)}")
