"""Golden tests: trace each example under ``python -m commtrace run`` (2 ranks,
mp.spawn on gloo) and assert the exact per-rank sequence of DDP's ops.

The expected sequences are derived by hand from what DDP (torch 2.13) documents
and does, not recorded from a run:

* construction (phase ddp_init, iteration 0): all_gather int64[1] + broadcast
  int64[N] (detail param_check: every rank's parameter shapes must agree), then
  the module-state broadcast(s) from rank 0 (detail module_state; one per dtype);
* step 1: ONE all_reduce of all gradients (bucket 0). Without
  find_unused_parameters DDP does not know the gradient-ready order yet and
  puts everything in one bucket;
* start of step 2 (phase forward): two int32 broadcasts (detail bucket_rebuild:
  rank 0's new bucket layout, built from step 1's ready order);
* from step 2 on: one all_reduce per bucket per step (bucket 0..n-1);
* broadcast_buffers=True with buffers: at every forward, before the model
  runs, rank 0's buffers are broadcast (detail buffers; one per dtype).

A row is (op, phase, iteration, bucket, detail) with None for NA.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("torch")
import commtrace  # noqa: E402
import helpers as h  # noqa: E402  (tests/ is on sys.path: tests/conftest.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")

# -- running ------------------------------------------------------------------------------

_RUNS: dict = {}


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMTRACE_")}
    for k in ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)  # the examples start their own ranks
    env.update(OMP_NUM_THREADS="1", MASTER_PORT=str(h.free_port()))   # the ranks' rendezvous
    return env


def trace(tmp_root, script: str, *args: str) -> "pd.DataFrame":
    """Run examples/<script> under commtrace once per (script, args) in this session."""
    key = (script, args)
    if key not in _RUNS:
        out = os.path.join(str(tmp_root), re.sub(r"[^\w.-]+", "_", "-".join((script,) + args)))
        cmd = [sys.executable, "-m", "commtrace", "run", "-o", out, os.path.join("examples", script), *args]
        p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
        _RUNS[key] = (out, commtrace.load(out), p.stdout)
    return _RUNS[key][1]


def run_dir(script: str, *args: str) -> str:
    return _RUNS[(script, args)][0]


def run_stdout(script: str, *args: str) -> str:
    return _RUNS[(script, args)][2]


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory):
    return tmp_path_factory.mktemp("examples")


# -- row helpers ----------------------------------------------------------------------------

def _na(v):
    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else v


def rank_rows(df, rank: int):
    return df[df["rank"] == rank].sort_values("seq")


def seq_of(df, rank: int) -> list[tuple]:
    """[(op, phase, iteration, bucket, detail)] of one rank, in issue order."""
    r = rank_rows(df, rank)
    return [(str(o), _na(p), int(i), None if _na(b) is None else int(b), _na(d))
            for o, p, i, b, d in zip(r["op"], r["phase"], r["iteration"], r["bucket"], r["detail"])]


def col(df, rank: int, name: str) -> list:
    r = rank_rows(df, rank)
    return [_na(v) for v in r[name]] if name in r else [None] * len(r)


# -- expected sequences ---------------------------------------------------------------------

def ddp_init(state_broadcasts: int = 1) -> list[tuple]:
    return ([("all_gather", "ddp_init", 0, None, "param_check"),
             ("broadcast", "ddp_init", 0, None, "param_check")]
            + [("broadcast", "ddp_init", 0, None, "module_state")] * state_broadcasts)


def step(it: int, buckets: int, buffer_broadcasts: int = 0, join: bool = False) -> list[tuple]:
    """One training step in DDP's order (DistributedDataParallel._pre_forward, then backward)."""
    rows = []
    if join:  # Join.notify_join_context: "this rank is still active"
        rows.append(("all_reduce", "forward", it, None, "join_notify"))
    if it == 2:  # Reducer::rebuild_buckets: rank 0's layout, two int32 broadcasts
        rows += [("broadcast", "forward", it, None, "bucket_rebuild")] * 2
    rows += [("broadcast", "forward", it, None, "buffers")] * buffer_broadcasts
    if join:  # _check_global_requires_backward_grad_sync
        rows.append(("all_reduce", "forward", it, None, "join_sync_flag"))
    n = 1 if it == 1 else buckets  # step 1: one bucket holding every gradient
    rows += [("all_reduce", "backward", it, b, None) for b in range(n)]
    return rows


def steps(n: int, buckets: int, **kw) -> list[tuple]:
    return [row for it in range(1, n + 1) for row in step(it, buckets, **kw)]


def check_callsites(df, script: str, expect: dict) -> None:
    """Every row's callsite is a line of the example; that line contains expect[phase or detail]."""
    lines = open(os.path.join(EXAMPLES, script)).read().splitlines()
    for rank in sorted(df["rank"].unique()):
        for cs, phase, detail in zip(col(df, rank, "callsite"), col(df, rank, "phase"), col(df, rank, "detail")):
            m = re.match(r"(.+):(\d+) \((\w+)\)$", str(cs))
            assert m, f"rank {rank}: callsite {cs!r} is not 'file:line (function)'"
            assert os.path.basename(m.group(1)) == script, f"rank {rank}: callsite {cs} not in {script}"
            text = lines[int(m.group(2)) - 1]
            want = expect[detail] if detail is not None and detail in expect else expect.get(phase)
            if want is not None:
                assert want in text, f"rank {rank} {phase}/{detail}: {cs} -> {text.strip()!r}, expected {want!r}"


# -- ddp_gloo_spawn.py ----------------------------------------------------------------------

def test_ddp_gloo_spawn(runs_root):
    # Linear(16,64)+Linear(64,4): 1,348 float32 = 5.4 KB, far below any bucket cap,
    # so one bucket every step. 4 steps, then one all_reduce in region "eval":
    # no phase (NA), iteration stays 4 (DDP forward count).
    df = trace(runs_root, "ddp_gloo_spawn.py")
    expected = ddp_init(1) + steps(4, buckets=1) + [("all_reduce", None, 4, None, None)]
    for rank in (0, 1):
        assert seq_of(df, rank) == expected, f"rank {rank}"
        r = rank_rows(df, rank)
        assert list(r["dtype"].astype(str)) == (["int64", "int64", "float32", "float32"] + ["int32"] * 2
                                               + ["float32"] * 4), f"rank {rank}"
        assert col(df, rank, "region") == [None] * 9 + ["eval"]
        # every gradient all_reduce carries the whole model: 1,348 floats
        grads = r[r["phase"] == "backward"]
        assert set(grads["bytes"]) == {1348 * 4}
        # bucket params: the model's four parameters (order = gradient-ready order)
        assert all(set(p.split(",")) == {"0.weight", "0.bias", "2.weight", "2.bias"} for p in grads["params"])
        assert set(r["module"].dropna().astype(str)) == {"Sequential"}
    check_callsites(df, "ddp_gloo_spawn.py", {"ddp_init": "DDP(", "backward": ".backward()",
                                              "bucket_rebuild": "model(x)", None: "dist.all_reduce("})


# -- bucket_sweep.py ------------------------------------------------------------------------

CAPS = ("0.25", "1", "25")
# Six Linear(300,300): per layer 360,000 (weight) + 1,200 (bias) bytes = 361,200.
# Gradients become ready last layer first, bias before weight; DDP closes a bucket
# once it reaches the cap (an explicit cap also applies to the first bucket):
#   0.25 MiB (262,144): one layer per bucket            -> 6 buckets of 361,200 bytes
#   1 MiB (1,048,576):  2 layers = 722,400 < cap, 3 layers = 1,083,600 -> 2 buckets
#   25 MiB:             all 2,167,200 bytes              -> 1 bucket
SWEEP = {"0.25": [[10], [8], [6], [4], [2], [0]], "1": [[10, 8, 6], [4, 2, 0]], "25": [[10, 8, 6, 4, 2, 0]]}
MODEL_BYTES = 6 * 361_200


def _sweep(runs_root, cap):
    return trace(runs_root, "bucket_sweep.py", "--bucket-cap-mb", cap, "--steps", "3")


@pytest.mark.parametrize("cap", CAPS)
def test_bucket_sweep_sequence(runs_root, cap):
    df = _sweep(runs_root, cap)
    layout = SWEEP[cap]
    expected = ddp_init(1) + steps(3, buckets=len(layout))
    for rank in (0, 1):
        assert seq_of(df, rank) == expected, f"cap {cap} rank {rank}"
        r = rank_rows(df, rank)
        rebuilt = r[(r["phase"] == "backward") & (r["iteration"] >= 2)]
        for _, row in rebuilt.iterrows():
            layers = layout[int(row["bucket"])]
            assert set(str(row["params"]).split(",")) == {f"{i}.{w}" for i in layers for w in ("weight", "bias")}
            assert row["bytes"] == 361_200 * len(layers)
        first = r[(r["phase"] == "backward") & (r["iteration"] == 1)]
        assert list(first["bytes"]) == [MODEL_BYTES]
    check_callsites(df, "bucket_sweep.py", {"ddp_init": "DDP(", "backward": ".backward()", "forward": "model(x)"})


@pytest.mark.parametrize("cap", CAPS)
def test_bucket_sweep_prints_the_rebuilt_buckets(runs_root, cap):
    """The script's own line shows the buckets of steps 2+ (SWEEP), not construction's one bucket."""
    _sweep(runs_root, cap)
    want = ", ".join(str(361_200 * len(layers)) for layers in SWEEP[cap])
    assert f"bucket sizes (bytes) {want}\n" in run_stdout("bucket_sweep.py", "--bucket-cap-mb", cap, "--steps", "3")


def test_bucket_sweep_trend(runs_root):
    """Fewer, larger all_reduces per step as the cap grows; same bytes per step."""
    per_step, bytes_per_step = [], []
    for cap in CAPS:
        df = _sweep(runs_root, cap)
        g = df[(df["phase"] == "backward") & (df["iteration"] >= 2) & (df["rank"] == 0)]
        counts = g.groupby("iteration").size()
        assert counts.nunique() == 1, f"cap {cap}: all_reduces per step vary: {counts.to_dict()}"
        per_step.append(int(counts.iloc[0]))
        bytes_per_step.append(set(g.groupby("iteration")["bytes"].sum()))
    assert per_step == [6, 2, 1]
    assert all(a > b for a, b in zip(per_step, per_step[1:])), per_step
    assert bytes_per_step == [{MODEL_BYTES}] * 3


def test_bucket_sweep_compare(runs_root):
    for cap in CAPS:
        _sweep(runs_root, cap)
    dirs = [run_dir("bucket_sweep.py", "--bucket-cap-mb", c, "--steps", "3") for c in ("25", "1", "0.25")]
    p = h.commtrace_main("compare", *dirs)      # in-process: the test reads its output only
    assert p.returncode == 0, p.stdout + p.stderr
    assert "step time" in p.stdout and "exposed" in p.stdout and "busbw" in p.stdout
    # Step-centric, past the bucket rebuild (step 3 only): per rank and step the
    # same gradient bytes, cut into 1, 2 and 6 all_reduces.
    p = h.commtrace_main("compare", *dirs, "--skip-steps", "2", "--json", "-", "--by", "op,bucket")
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(p.stdout)
    ops = [data["steps"][d]["ops"]["median"] for d in data["runs"]]
    assert ops == [1, 2, 6]
    assert [data["steps"][d]["bytes"]["median"] for d in data["runs"]] == [MODEL_BYTES] * 3
    assert data["steps"][data["runs"][2]]["ops"]["delta_pct"] == 500.0
    buckets = {r["bucket"] for r in data["rows"] if r["op"] == "all_reduce"}
    assert buckets == {str(b) for b in range(6)}     # --by op,bucket: one row per bucket number


def test_bucket_sweep_script_calls_compare():
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh")
    path = os.path.join(EXAMPLES, "bucket_sweep.sh")
    assert subprocess.run([sh, "-n", path]).returncode == 0
    text = open(path).read()
    assert "for cap in 0.25 1 25" in text
    assert 'commtrace compare "$OUT/sweep-25" "$OUT/sweep-1" "$OUT/sweep-0.25"' in text


# -- uneven_inputs.py -----------------------------------------------------------------------

# Rank 0 has 2 batches, rank 1 has 4 (base 2 + 2*rank). Model: 321 float32, one bucket.
# Both ranks, steps 1-2 under model.join(): join_notify all_reduce, [step 2: rebuild],
# join_sync_flag all_reduce, gradient all_reduce.
# Rank 1 alone, steps 3-4: the same, while rank 0 sits in Join.__exit__ and answers
# each of rank 1's three all_reduces: the non-joined count (pairs with join_notify),
# the sync flag (join_sync_flag, is_joined_rank=True) and a zero-filled shadow of
# every gradient bucket. Then both ranks meet in Join.__exit__: the count (0 -> done),
# _find_common_rank (int64 MAX all_reduce) and the final model broadcast from the
# last joiner (module_state).
A, B = 2, 4
SHADOW_ROUND = [("all_reduce", "join", "join_count", "float32", "[[1]]"),        # _get_num_nonjoined_procs
                ("all_reduce", "join", "join_sync_flag", "float32", "[[1]]"),    # sync flag (zeros)
                ("all_reduce", "join", "join_shadow_grad", "float32", "[[321]]")]  # shadow of bucket 0
FINAL = [("all_reduce", "join", "join_count", "float32", "[[1]]"),               # count = 0: all joined
         ("all_reduce", "join", "join_final_model", "int64", "[[1]]"),           # _find_common_rank
         ("broadcast", "join", "module_state", "float32", "[[321]]")]            # _sync_final_model


def _uneven(runs_root):
    return trace(runs_root, "uneven_inputs.py")


def _kinds(df, rank):
    r = rank_rows(df, rank)
    return [(str(o), _na(p), _na(d), str(t), str(s))
            for o, p, d, t, s in zip(r["op"], r["phase"], r["detail"], r["dtype"], r["shapes"])]


def test_uneven_inputs_ops_and_phases(runs_root):
    df = _uneven(runs_root)
    for rank, n in ((0, A), (1, B)):
        active = ddp_init(1) + steps(n, buckets=1, join=True)
        got = seq_of(df, rank)
        assert got[:len(active)] == active, f"rank {rank}"
        tail = SHADOW_ROUND * (B - n) + FINAL
        assert _kinds(df, rank)[len(active):] == tail, f"rank {rank}"
        kinds = _kinds(df, rank)[:len(active)]
        # join_notify / join_sync_flag are float32[1], not the 321-float gradient bucket
        for (op, phase, detail, dtype, shapes) in kinds:
            if detail in ("join_notify", "join_sync_flag"):
                assert (op, phase, dtype, shapes) == ("all_reduce", "forward", "float32", "[[1]]")
            if phase == "backward":
                assert (op, detail, shapes) == ("all_reduce", None, "[[321]]")
    # Distinguishable: a normal gradient all_reduce is phase backward; nothing the
    # joined rank shadows is, and no join bookkeeping op is.
    r0 = rank_rows(df, 0)
    assert ((r0["phase"] == "backward").sum()) == A
    assert ((r0["phase"] == "join").sum()) == 3 * (B - A) + 3
    assert ((rank_rows(df, 1)["phase"] == "backward").sum()) == B
    check_callsites(df, "uneven_inputs.py", {"join": "model.join()", "backward": ".backward()",
                                             "forward": "model(x)", "ddp_init": "DDP("})


def _join_rows(df, rank):
    r = rank_rows(df, rank)
    return r[r["phase"] == "join"]


def test_uneven_inputs_join_buckets(runs_root):
    df = _uneven(runs_root)
    for rank in (0, 1):
        j = _join_rows(df, rank)
        got = [(str(s), None if _na(b) is None else int(b), _na(p))
               for s, b, p in zip(j["shapes"], j["bucket"], j["params"])]
        names = {"0.weight", "0.bias", "2.weight", "2.bias"}
        expected_shadow = [("[[1]]", None, None), ("[[1]]", None, None), ("[[321]]", 0, "*")] * (B - A if rank == 0 else 0)
        expected = expected_shadow + [("[[1]]", None, None), ("[[1]]", None, None), ("[[321]]", None, None)]
        assert [(s, b) for s, b, _ in got] == [(s, b) for s, b, _ in expected], f"rank {rank}"
        for (_, b, p), (_, _, want) in zip(got, expected):
            if want == "*":
                assert set(str(p).split(",")) == names
            else:
                assert p is None


def test_uneven_inputs_join_iterations(runs_root):
    df = _uneven(runs_root)
    j = _join_rows(df, 0)
    shadow = list(j["iteration"])[:3 * (B - A)]
    assert shadow == [it for it in range(A + 1, B + 1) for _ in range(3)]
    # and the active rank's training ops in those iterations pair up one to one
    # (which iteration the final count/model sync should carry is left open here)
    r1 = rank_rows(df, 1)
    for it in range(A + 1, B + 1):
        mine = r1[(r1["iteration"] == it) & (r1["phase"] != "join")]
        theirs = j[j["iteration"] == it]
        assert list(mine["op"].astype(str)) == list(theirs["op"].astype(str))
        assert list(mine["shapes"].astype(str)) == list(theirs["shapes"].astype(str))


def test_uneven_inputs_report(runs_root):
    """Steps per rank and the per-phase table of a join run: each op under its own
    rank's phase, join's flags apart from its shadow buckets."""
    from commtrace.analysis.partitioned import analyse
    _uneven(runs_root)
    rep = analyse(run_dir("uneven_inputs.py"), op_view=True)
    assert rep.steps.per_rank.groupby("rank").size().to_dict() == {0: A, 1: B}
    assert rep.steps.across.loc[1, "ranks"] == 2 and rep.steps.across.loc[B, "ranks"] == 1
    ph = rep.by_phase
    shadow = ph.loc[("join", "all_reduce", "join_shadow_grad")]
    assert (shadow["ops"], shadow["collectives"], shadow["bytes"]) == (B - A, B - A, (B - A) * 321 * 4)
    count = ph.loc[("join", "all_reduce", "join_count")]
    assert (count["ops"], count["collectives"]) == (B - A + 2, B - A + 1)   # rank 0: 3, rank 1: the final one
    flag = ph.loc[("join", "all_reduce", "join_sync_flag")]
    assert (flag["ops"], flag["bytes"]) == (B - A, (B - A) * 4)
    # rank 0 shadows in "join" what rank 1 runs in forward/backward: 3 per round
    assert len(rep.split) == 3 * (B - A)
    assert set(rep.split["by_rank"]) == {"forward: 1; join: 0", "backward: 1; join: 0"}


# -- buffers.py -----------------------------------------------------------------------------

# Linear(8,16)+BatchNorm1d(16)+Linear(16,2): 210 float32 parameters (one bucket);
# buffers running_mean/running_var float32[16] each and num_batches_tracked int64[1].
BUFFER_NAMES = {"1.running_mean", "1.running_var", "1.num_batches_tracked"}


def test_buffers_broadcast_every_forward(runs_root):
    # Construction broadcasts parameters+float buffers (210+32 floats) and the int64
    # buffer: 2 module_state broadcasts. Each forward: float32[32] + int64[1] buffers.
    df = trace(runs_root, "buffers.py", "--steps", "3")
    expected = ddp_init(2) + steps(3, buckets=1, buffer_broadcasts=2)
    for rank in (0, 1):
        assert seq_of(df, rank) == expected, f"rank {rank}"
        r = rank_rows(df, rank)
        buf = r[r["detail"] == "buffers"]
        assert list(zip(buf["dtype"].astype(str), buf["shapes"].astype(str))) == [("float32", "[[32]]"), ("int64", "[[1]]")] * 3
        assert all(set(str(p).split(",")) == BUFFER_NAMES for p in buf["params"])
        state = r[r["detail"] == "module_state"]
        assert list(state["shapes"].astype(str)) == ["[[242]]", "[[1]]"]
    check_callsites(df, "buffers.py", {"ddp_init": "DDP(", "backward": ".backward()", "forward": "model(x)"})


def test_buffers_no_broadcast(runs_root):
    # broadcast_buffers=False: no per-forward broadcast, and construction syncs the
    # 210 parameters only (one module_state broadcast, no buffers).
    df = trace(runs_root, "buffers.py", "--steps", "3", "--no-broadcast-buffers")
    expected = ddp_init(1) + steps(3, buckets=1)
    for rank in (0, 1):
        assert seq_of(df, rank) == expected, f"rank {rank}"
        state = rank_rows(df, rank)
        assert list(state[state["detail"] == "module_state"]["shapes"].astype(str)) == ["[[210]]"]
        assert not (state["detail"] == "buffers").any()


# -- ddp_mpi.py -----------------------------------------------------------------------------

def test_ddp_mpi_without_commtrace_says_what_it_needs():
    """On a torch without MPI (PyPI) the bare script exits 1 with one line naming commtrace run
    (examples/README.md); traced under mpirun it runs: tests/mpi/test_mpi_backend.py."""
    import torch.distributed as dist
    if dist.is_mpi_available():
        pytest.skip("this torch has its own MPI backend: the script runs as is")
    p = subprocess.run([sys.executable, os.path.join("examples", "ddp_mpi.py")], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stderr.strip().splitlines() == [
        "ddp_mpi.py: this torch has no MPI backend; commtrace provides one: "
        "mpirun -n 2 python -m commtrace run examples/ddp_mpi.py"]
