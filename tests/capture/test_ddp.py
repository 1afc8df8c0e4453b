"""DDP's exact communication sequence on gloo, and bitwise-identical training with and without tracing."""
from __future__ import annotations

import json

import pytest
import torch

import helpers as h
from helpers import Launch, worker

W = 2
STEPS = 4
F = 4
LIN = 512 * 512 + 512            # floats of one Linear(512, 512)


def _ddp(tmp, traced: bool) -> Launch:
    args = [worker("ddp.py"), W, h.free_port(), tmp / "o", STEPS]
    cmd = h.commtrace_cmd(tmp / "run", *args) if traced else [h.PY, *args]
    return Launch(h.run(cmd, timeout=150), tmp / "run", tmp / "o")


@pytest.fixture(scope="module")
def traced(launches):
    launch = launches("ddp-traced", lambda tmp: _ddp(tmp, True))
    launch.result.check(0)
    return launch


@pytest.fixture(scope="module")
def untraced(launches):
    launch = launches("ddp-untraced", lambda tmp: _ddp(tmp, False))
    launch.result.check(0)
    return launch


def _seq(d):
    return [(str(o), str(dt), int(b)) for o, dt, b in zip(d["op"], d["dtype"].astype(str), d["bytes"])]


def _phases(df, rank):
    d = df[df["rank"] == rank].sort_values("t_start_ns")
    phases, cur = [], None
    for row in d.itertuples(index=False):
        if row.op == "barrier":
            cur = []
            phases.append(cur)
            continue
        cur.append(row)
    return [_seq_rows(p) for p in phases]


def _seq_rows(rows):
    return [(str(r.op), str(r.dtype), int(r.bytes)) for r in rows]


def construction(n_param_dims: int, state_floats: int, int64_buffers: int):
    """DDP.__init__: parameter-shape check (all_gather of the count, broadcast of sizes+strides),
    then the module state broadcast (one flat tensor per dtype)."""
    seq = [("all_gather", "int64", 8), ("broadcast", "int64", 8 * 2 * n_param_dims),
           ("broadcast", "float32", F * state_floats)]
    if int64_buffers:
        seq.append(("broadcast", "int64", 8 * int64_buffers))
    return seq


def rebuild(n_params: int, n_buckets: int):
    """Start of step 2: bucket indices (+ count) and bucket sizes, as int32."""
    return [("broadcast", "int32", 4 * (n_params + 1)), ("broadcast", "int32", 4 * n_buckets)]


def expected_phase_a():
    # 3 x Linear(512,512), 6 params, 9 dims (weights 2-d, biases 1-d).
    seq = construction(n_param_dims=9, state_floats=3 * LIN, int64_buffers=0)
    seq.append(("all_reduce", "float32", F * 3 * LIN))          # step 1: one bucket, everything
    # Rebuilt buckets in reverse order: first cap 1 MiB, then bucket_cap_mb=1 -> a bucket closes
    # as soon as it reaches 1 MiB: {b3, w3} = 1 MiB + 2 KiB, {b2, w2}, {b1, w1}.
    seq += rebuild(n_params=6, n_buckets=3)
    for _ in range(2, STEPS + 1):
        seq += [("all_reduce", "float32", F * LIN)] * 3
    return seq


def expected_bn(broadcast_buffers: bool):
    # Linear(8,8) + BatchNorm1d(8): params 64+8+8+8 = 88 floats (dims 2+1+1+1 = 5);
    # buffers running_mean/var (16 floats) and num_batches_tracked (int64).
    fwd = [("broadcast", "float32", F * 16), ("broadcast", "int64", 8)] if broadcast_buffers else []
    state = 88 + (16 if broadcast_buffers else 0)
    seq = construction(n_param_dims=5, state_floats=state, int64_buffers=1 if broadcast_buffers else 0)
    seq += fwd + [("all_reduce", "float32", F * 88)]
    seq += rebuild(n_params=4, n_buckets=1) + fwd + [("all_reduce", "float32", F * 88)]
    return seq


def test_ddp_exact_sequence(traced):
    df = traced.frame
    assert set(df["status"]) == {"completed"}
    for r in range(W):
        a, b, c, tail = _phases(df, r)
        assert a == expected_phase_a(), f"rank {r} phase A"
        assert b == expected_bn(True), f"rank {r} BatchNorm, broadcast_buffers=True"
        assert c == expected_bn(False), f"rank {r} BatchNorm, broadcast_buffers=False"
        assert tail == []
    # every collective matched on both ranks
    for (_, seq), d in df.groupby(["group", "seq"], observed=True):
        assert sorted(d["rank"]) == [0, 1] and d["bytes"].nunique() == 1, seq


def test_ddp_parameters_bitwise_identical(traced, untraced):
    a = torch.load(traced.out_prefix + ".params.pt")
    b = torch.load(untraced.out_prefix + ".params.pt")
    assert a.keys() == b.keys() and len(a) == 6
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_ddp_inside_rpc_distributed_autograd_is_backward(tmp_path):
    """pytorch/examples distributed/rpc/ddp_rpc: DDP's gradient all_reduces are launched by
    torch.distributed.autograd.backward's engine; they are phase backward inside a backward
    span (they were phase "-", with no span). 3 steps: one all_reduce per step (one bucket)."""
    if not torch.distributed.rpc.is_available():
        pytest.skip("torch built without RPC")
    h.run(h.commtrace_cmd(tmp_path / "run", worker("rpc_ddp.py"), h.free_port(), h.free_port(), 3),
          timeout=180).check(0)
    df = h.load(tmp_path / "run")
    import commtrace
    spans = commtrace.load(tmp_path / "run", table="spans")
    for r in range(2):
        d = df[(df["rank"] == r) & (df["op"] == "all_reduce")]
        assert list(d["phase"].astype(str)) == ["backward"] * 3
        bw = spans[(spans["rank"] == r) & (spans["phase"] == "backward")]
        assert len(bw) == 3
        t = d["t_start_ns"].to_numpy()
        assert all(((bw["t_begin_ns"] <= x) & (x <= bw["t_end_ns"])).any() for x in t)


def test_rpc_distributed_optimizer_step_is_an_optimizer_step(tmp_path):
    """RPC's DistributedOptimizer(SGD).step(context_id) runs TorchScript's functional SGD on the
    parameters' owner (no torch.optim step, no step hook): each is the trainer's optimizer step
    (before, "no optimizer step was recorded"). 3 steps per rank, DDP's all_reduce in each."""
    if not torch.distributed.rpc.is_available():
        pytest.skip("torch built without RPC")
    run = tmp_path / "run"
    h.run(h.commtrace_cmd(run, worker("rpc_ddp.py"), h.free_port(), h.free_port(), 3, "distopt"),
          timeout=180).check(0)
    import commtrace
    spans = commtrace.load(run, table="spans")
    opt = spans[spans["phase"] == "optimizer"]
    for r in range(2):
        mine = opt[opt["rank"] == r]
        assert list(mine["step"]) == [1, 2, 3] and set(mine["module"]) == {"DistributedOptimizer"}, mine
    out = tmp_path / "r.json"
    h.commtrace_main("report", run, "-q", "--json", out).check(0)
    steps = json.loads(out.read_text())["steps"]      # step 2 also has DDP's two bucket-rebuild broadcasts
    assert [(s["step"], s["ops"]) for s in steps] == [(1, 1), (2, 3), (3, 1)], steps
