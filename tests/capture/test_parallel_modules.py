"""FSDP2, FSDP1, tensor parallel and 2-D (FSDP2 x TP) runs: every op in forward and
backward names its module, phase, role and mesh dimension, and the per-module counts
equal those of torch's own CommDebugMode, run on the same steps inside the traced
program (tests/capture/workers/parallel.py). Every op inside a step has a module and
a phase, or is phase optimizer (gradient clipping's norm all_reduces, the step's
redistributions), as many each step as CommDebugMode counts around clipping and step.

CommDebugMode counts an op under the module its tracker names and under every
parent of it. Its tracker never ends a module's backward: an op issued after a
submodule's backward is over (FSDP2's reduce_scatter of ``layers.1``, issued once
the gradient reached the block's input) is counted under the last submodule whose
backward began (``layers.1.norm``), where commtrace names the block. So counts are
compared, including submodules, for the modules that communicate by plan: the root,
the FSDP units and the tensor-parallel Linears. The root's own reduce_scatter runs
in FSDP2's end-of-backward callback, after every backward (no gradient reaches the
root's input): CommDebugMode counts it under ``layers.0``, whose backward began last;
commtrace names the root (``Net``, the class the program wrote), the unit whose gradients it reduces.
"""
from __future__ import annotations

import json

import pytest

import helpers as h
from helpers import worker

from commtrace.trace import schema

STEPS = 2
UNITS = ("layers.0", "layers.1")
TP_LINEARS = ("layers.0.up", "layers.0.down", "layers.1.up", "layers.1.down")


def _launch(tmp, scenario: str, world: int, traced: bool = True):
    out = tmp / ("out" if traced else "plain")
    args = [worker("parallel.py"), scenario, world, h.free_port(), out, STEPS]
    cmd = h.commtrace_cmd(tmp / "run", *args) if traced else [h.PY, *args]
    h.run(cmd, timeout=400, env=h.clean_env()).check(0)
    return [json.loads((tmp / f"{out.name}.{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module", params=[("fsdp2-keep", 2), ("fsdp2-prefetch", 2), ("fsdp1", 2), ("tp", 2), ("2d", 4)],
                ids=["fsdp2-keep", "fsdp2-prefetch", "fsdp1", "tp", "2d"])
def launched(request, tmp_path_factory):
    scenario, world = request.param
    why = h.fsdp2_lacks_cpu() if scenario.startswith("fsdp2") or scenario == "2d" else None
    if why:
        pytest.skip(f"FSDP2 cannot train on CPU with this torch: {why}")
    why = h.comm_debug_mode_lacks_modules()
    if why:  # the worker counts with it, for every scenario
        pytest.skip(f"torch's CommDebugMode cannot count per module on this torch: {why}")
    tmp = tmp_path_factory.mktemp(scenario)
    return scenario, world, _launch(tmp, scenario, world), h.load(tmp / "run"), tmp


def _op_kind(name: str) -> str:
    n = name.replace("_", "")
    for kind in ("allgather", "reducescatter", "allreduce"):
        if kind in n:
            return {"allgather": "all_gather", "reducescatter": "reduce_scatter", "allreduce": "all_reduce"}[kind]
    return name


def _cdm_counts(result: dict, module: str) -> dict:
    """CommDebugMode's count per (phase, op) for ``module`` (our name) over every step."""
    root = result["root"]
    key = root if module == root else f"{root}.{module}"
    if key not in result["steps"][0]["modules"]:  # FSDP1: CommDebugMode names its wrappers' attributes
        key = f"{root}._fsdp_wrapped_module.{module}"
    out: dict = {}
    for step in result["steps"]:
        for phase, ops in step["modules"].get(key, {}).items():
            for op, n in ops.items():
                out[(phase, _op_kind(op))] = out.get((phase, _op_kind(op)), 0) + n
    return {k: v for k, v in out.items() if v}


def _our_counts(d, module: str, root: str) -> dict:
    """Our ops per (phase, op) named ``module`` or one of its submodules (the root: every module)."""
    mods = d["module"].astype(str)
    inside = (mods == module) | mods.str.startswith(module + ".") if module != root else d["module"].notna()
    sel = d[inside & d["phase"].isin(["forward", "backward"])]
    return {(str(p), str(o)): int(n) for (p, o), n in sel.groupby(["phase", "op"], observed=True).size().items() if n}


def test_module_counts_equal_comm_debug_mode(launched):
    scenario, world, results, df, _ = launched
    compared = 0
    for r in range(world):
        res, d = results[r], df[df["rank"] == r]
        root = res["root"]
        modules = [root, *(UNITS if scenario != "tp" else ()), *(TP_LINEARS if scenario in ("tp", "2d") else ())]
        for m in modules:
            ours = _our_counts(d, m, root)
            if m == UNITS[0]:  # CommDebugMode's stale layers.0: the root's reduce_scatter (see above)
                root_reduce = (d["detail"] == "fsdp_reduce_grad") & ~d["module"].astype(str).str.startswith("layers.")
                for k, n in _our_counts(d[root_reduce], root, root).items():
                    ours[k] = ours.get(k, 0) + n
            if scenario == "fsdp1" and m == UNITS[1]:
                # FSDP1's layers.1 pre-backward hook prefetches layers.0 as the gradient reaches the
                # head's input: CommDebugMode counts it under the head, whose backward it saw begin
                # last; commtrace names layers.1, the unit whose hook issued it (as FSDP2's)
                ours[("backward", "all_gather")] -= STEPS
            assert ours == _cdm_counts(res, m), (scenario, r, m)
            compared += 1
        # Every op CommDebugMode saw (its "Global" entry) is one of ours in forward or backward.
        total = sum(n for step in res["steps"] for ops in step["modules"]["Global"].values() for n in ops.values())
        assert total == int(d["phase"].isin(["forward", "backward"]).sum())
    assert compared >= world * 3


def test_every_op_in_forward_and_backward_has_module_role_and_mesh_dim(launched):
    scenario, world, _, df, _ = launched
    fb = df[df["phase"].isin(["forward", "backward"])]
    assert len(fb) and fb["module"].notna().all()
    roles = set(fb["detail"].astype(str))
    assert roles <= set(schema.ROLE_DETAILS) - {"dtensor_distribute"} == {"fsdp_unshard", "fsdp_reduce_grad",
                                                                          "dtensor_redistribute"}
    if scenario.startswith("fsdp") or scenario == "2d":
        fsdp = fb[fb["op"].isin(["all_gather", "reduce_scatter"]) & (fb["mesh_dim"].isna() | (fb["mesh_dim"] == "dp"))]
        assert set(fsdp["detail"].astype(str)) == {"fsdp_unshard", "fsdp_reduce_grad"}
        assert set(fsdp[fsdp["op"] == "all_gather"]["detail"].astype(str)) == {"fsdp_unshard"}
        assert set(fsdp[fsdp["op"] == "reduce_scatter"]["detail"].astype(str)) == {"fsdp_reduce_grad"}
        # The forward all_gathers (prefetched ones included) are phase forward, not "-".
        assert (fsdp["phase"] == "forward").sum() > 0
    if scenario in ("tp", "2d"):
        tp = fb[fb["mesh_dim"] == "tp"]
        assert len(tp) and set(tp["detail"].astype(str)) == {"dtensor_redistribute"}
        assert set(tp["module"].astype(str)) <= set(TP_LINEARS)
    expected_dims = {"fsdp2-keep": {"dp"}, "fsdp2-prefetch": {"dp"}, "fsdp1": set(), "tp": {"tp"},
                     "2d": {"dp", "tp"}}[scenario]
    assert set(fb["mesh_dim"].dropna().astype(str)) == expected_dims
    # Module names are the parameters' names: no wrapper attribute (FSDP1's _fsdp_wrapped_module).
    assert not fb["module"].astype(str).str.contains("_wrapped_module").any()
    # tp: init_device_mesh made the world with no backend named ("undefined" to torch): the
    # groups name the one the CPU runs on (torch < 2.5 with CUDA built in: "cpu:gloo,cuda:nccl").
    backends = set(df["backend"].astype(str))
    assert all("gloo" in b for b in backends) and "undefined" not in backends, backends


def test_tp_set_up_ops_are_phase_tp_init(launched):
    """parallelize_module's ops (the scatter / broadcast of each parameter from the mesh's first
    rank) are phase tp_init, role dtensor_distribute, as DDP's construction is phase ddp_init; the
    program's own distribute_tensor outside any phase is phase dtensor_init; no other op is either."""
    scenario, world, _, df, _ = launched
    setup = df[df["detail"] == "dtensor_distribute"]
    if scenario not in ("tp", "2d"):
        assert not len(setup) and not df["phase"].isin(["tp_init", "dtensor_init"]).any()
        return
    direct = f"parallel.py:{_worker_line('# DIRECT')} (build)"
    for r in range(world):
        set_up = df["callsite"].astype(str).str.endswith(("(build)", "(_parallelize_block)"))  # 2d: per block
        built = df[(df["rank"] == r) & set_up & (df["mesh_dim"] == "tp")]
        got = {(str(p), str(o), str(det), str(c).endswith(direct)): int(n) for (p, o, det, c), n in
               built.groupby(["phase", "op", "detail", "callsite"], observed=True, dropna=False).size().items() if n}
        # per Block: up's weight and bias and down's weight are sharded (scatter), down's bias replicated
        want = {("tp_init", "scatter", "dtensor_distribute", False): 6,
                ("tp_init", "broadcast", "dtensor_distribute", False): 2}
        if scenario == "tp":
            want[("dtensor_init", "scatter", "dtensor_distribute", True)] = 1
        assert got == want, got
        # each parameter's ops are its module's (the plan's entry that parallelized it)
        tp_init = built[built["phase"] == "tp_init"]
        mods = {(str(o), str(m)) for o, m in zip(tp_init["op"], tp_init["module"])}
        assert mods == {("scatter", "layers.0.up"), ("scatter", "layers.1.up"), ("scatter", "layers.0.down"),
                        ("scatter", "layers.1.down"), ("broadcast", "layers.0.down"),
                        ("broadcast", "layers.1.down")}, mods
        assert built[built["phase"] == "dtensor_init"]["module"].isna().all()
    assert len(setup) == world * (9 if scenario == "tp" else 8)


def _worker_line(marker: str) -> int:
    return next(i for i, t in enumerate(open(worker("parallel.py")), 1) if marker in t)


def test_every_op_inside_a_step_has_module_and_phase_or_is_optimizer(launched):
    """docs/report.md: inside a step, forward and backward ops name a module; the rest are
    phase optimizer (gradient clipping's norm all_reduces, called between backward and
    optimizer.step, and the step's own: DTensor gradients redistributed) and have none.
    Their count, step by step, is the one CommDebugMode counted around clipping, step and
    zero_grad in the same program (docs/report.md: it differs between torch releases)."""
    scenario, world, results, df, tmp = launched
    import commtrace
    steps = commtrace.load(tmp / "run", table="steps")
    assert sorted(steps["step"].unique()) == list(range(1, STEPS + 1))
    for r in range(world):
        d = df[df["rank"] == r]
        mine = steps[steps["rank"] == r]
        t = d["t_start_ns"].to_numpy()
        inside = d[[bool(((mine["t_begin_ns"] <= x) & (x <= mine["t_end_ns"])).any()) for x in t]]
        assert len(inside)
        fb = inside["phase"].isin(["forward", "backward"])
        assert inside.loc[fb, "module"].notna().all()
        rest = inside[~fb]
        assert set(rest["phase"].astype(str)) == {"optimizer"} and rest["module"].isna().all()
        assert set(rest["op"].astype(str)) == {"all_reduce"}  # the clipping norms, STEPS times at least
        assert len(rest) >= STEPS
        for row in mine.itertuples():  # one row a step
            in_step = rest[(rest["t_start_ns"] >= row.t_begin_ns) & (rest["t_start_ns"] <= row.t_end_ns)]
            ours = in_step.groupby(in_step["op"].astype(str)).size().to_dict()
            theirs = {}
            for op, n in results[r]["steps"][row.step - 1]["optimizer"].items():
                theirs[_op_kind(op)] = theirs.get(_op_kind(op), 0) + n
            assert ours == theirs, (scenario, r, row.step, ours, theirs)


def test_fsdp1_counts_by_hand(launched):
    """FSDP1, one unit per block plus the root (the head), default BACKWARD_PRE prefetch:
    forward gathers the root and both blocks; the root is not resharded after forward,
    so backward gathers the two blocks again; one reduce_scatter per unit; one norm
    all_reduce of FSDP1's clip_grad_norm_ (phase optimizer) per step."""
    scenario, world, _, df, _ = launched
    if scenario != "fsdp1":
        pytest.skip("FSDP1 only")
    for r in range(world):
        d = df[df["rank"] == r]
        got = {(str(p), str(o), str(det)): int(n) for (p, o, det), n in
               d.groupby(["phase", "op", "detail"], observed=True, dropna=False).size().items() if n}
        assert got == {("forward", "all_gather", "fsdp_unshard"): 3 * STEPS,
                       ("backward", "all_gather", "fsdp_unshard"): 2 * STEPS,
                       ("backward", "reduce_scatter", "fsdp_reduce_grad"): 3 * STEPS,
                       ("optimizer", "all_reduce", "nan"): STEPS,
                       ("nan", "barrier", "nan"): 1}, (r, got)
        fwd = d[(d["phase"] == "forward")]
        assert list(fwd["module"].astype(str)) == ["Net", "layers.0", "layers.1"] * STEPS
        # Backward: the root's pre-backward hook prefetches layers.1 (the prefetched unit's), layers.1's
        # prefetches layers.0 (layers.1's: it was the head's); each reduce_scatter is its unit's, the
        # root's too (it was layers.0's submodule's, whose backward autograd ran it in)
        bwd = d[(d["phase"] == "backward")].sort_values("t_start_ns")
        assert list(zip(bwd["op"], bwd["module"].astype(str))) == [
            ("all_gather", "layers.1"), ("all_gather", "layers.1"), ("reduce_scatter", "layers.1"),
            ("reduce_scatter", "layers.0"), ("reduce_scatter", "Net")] * STEPS, r


def test_reshard_after_forward_off_gathers_once_per_unit(launched):
    """By hand: every step gathers the root and both units in forward; with
    reshard_after_forward on they are freed after forward and gathered again in
    backward (3 more; 2 where torch keeps the root gathered, as 2.7 always does),
    with it off they stay gathered (none)."""
    scenario, world, results, df, _ = launched
    if not scenario.startswith("fsdp2"):
        pytest.skip("FSDP2 only")
    for r in range(world):
        d = df[(df["rank"] == r) & (df["detail"] == "fsdp_unshard")]
        fwd, bwd = (int((d["phase"] == p).sum()) for p in ("forward", "backward"))
        assert fwd == STEPS * 3  # the root and both units, every step
        again = 0 if scenario == "fsdp2-keep" else 2 + bool(results[r]["root_reshards"])
        assert bwd == STEPS * again, (scenario, r, bwd)


def test_fsdp2_gradient_reduction_names_its_unit(launched):
    """By hand: each FSDP2 unit -- the root (its head), layers.0, layers.1 -- reduces its
    gradients once a step, named after itself. The root's and layers.0's run in FSDP2's
    end-of-backward callback (no gradient reaches the model's input), when no module's
    backward is running: not under the last submodule whose backward began."""
    scenario, world, results, df, _ = launched
    if not (scenario.startswith("fsdp2") or scenario == "2d"):
        pytest.skip("FSDP2 only")
    for r in range(world):
        d = df[(df["rank"] == r) & (df["detail"] == "fsdp_reduce_grad") & (df["op"] == "reduce_scatter")]
        got = d.groupby(d["module"].astype(str)).size().to_dict()
        assert got == {"Net": STEPS, **{u: STEPS for u in UNITS}}, (scenario, r, got)


def test_root_is_named_by_the_class_the_program_wrote(launched):
    """The root is ``Net`` (as DDP's label is the class it wraps), not the class fully_shard made of
    it (``FSDPNet``) nor FSDP1's wrapper: it was ``FSDPNet`` in FSDP2 runs but ``Net`` in 2d, where
    parallelize_module named it before fully_shard changed its class. Every op's module is the root
    or a qualified name from it: 2d parallelizes each block by a call of its own, which named the
    blocks as roots (``up``, ``down`` for both blocks' Linears, then ``Block`` for both blocks)."""
    scenario, world, results, df, _ = launched
    named = set(df["module"].dropna().astype(str))
    if scenario != "tp":  # the root communicates (FSDP units)
        assert "Net" in named, named
    blocks = {f"layers.{i}{s}" for i in range(2) for s in ("", ".norm", ".up", ".down")}
    assert named <= {"Net", "head"} | blocks, (scenario, named)


def test_report_shows_per_module_table(launched):
    scenario, world, _, df, tmp = launched
    res = h.commtrace_main("report", tmp / "run", "--json", "-").check(0)
    rows = json.loads(res.stdout)["by_module"]
    fb = df[df["phase"].isin(["forward", "backward"])]
    got = {(r["module"], r["phase"]): r["ops"] for r in rows if r["phase"] in ("forward", "backward")}
    want = {(str(m), str(p)): int(n) for (m, p), n in fb.groupby(["module", "phase"], observed=True).size().items()
            if n}
    assert got == want
    assert all(0 <= r["exposed_ns"] <= r["comm_ns"] for r in rows)
    if scenario != "2d":  # the terminal table once
        return
    text = h.commtrace_main("report", tmp / "run", "--width", "160").check(0).stdout
    assert "Per module" in text and "layers.0" in text


def test_tp_traced_result_identical_to_untraced(launched, tmp_path):
    scenario, world, results, _, _ = launched
    if scenario != "tp":
        pytest.skip("one scenario suffices")
    plain = _launch(tmp_path, scenario, world, traced=False)
    assert [p["hash"] for p in plain] == [r["hash"] for r in results]
    assert [p["steps"] for p in plain] == [r["steps"] for r in results]


def test_torch_compile_with_a_mesh_behaves_as_untraced(tmp_path):
    """Dynamo traces module hooks: once a DeviceMesh turned the tracker on, a compiled
    module must still compile (no error, no graph break) and compute the same."""
    results = []
    for traced in (True, False):
        out = tmp_path / ("traced.json" if traced else "plain.json")
        args = [worker("mesh_compile.py"), h.free_port(), out]
        h.run(h.commtrace_cmd(tmp_path / "run", *args) if traced else [h.PY, *args], timeout=400,
              env=h.clean_env()).check(0)
        results.append(json.loads(out.read_text()))
    assert results[0] == results[1] and results[0]["graph_breaks"] == 0
    df = h.load(tmp_path / "run")
    assert list(df["op"]) == ["all_reduce", "all_reduce"]


def _broadcast_takes_group_src() -> bool:
    import inspect

    import torch.distributed as dist
    return "group_src" in inspect.signature(dist.broadcast).parameters


@pytest.mark.skipif(not _broadcast_takes_group_src(),
                    reason="this torch's dist.broadcast has no group_src (mesh_roots.py passes it)")
def test_one_call_on_several_groups_names_each_groups_root(tmp_path):
    """One broadcast call (same line, shape, group_src) on each dimension's group of a 2x2 mesh:
    each op's root is its own group's rank 0, as a global rank. (Found running PyTorch's
    test_device_mesh.py traced: the sig, interned per call without its group, kept the first
    group's root, and ``check`` reported 13 false root mismatches.)"""
    run = h.spawn_traced("mesh_roots.py", 4, tmp_path, timeout=180)
    run.result.check(0)
    df = run.frame
    for r in range(4):
        got = df[(df["rank"] == r) & (df["op"] == "broadcast")].sort_values("t_start_ns")["root"].tolist()
        assert got == run.rank_json(r)["roots"], r
    chk = h.commtrace_main("check", run.run_dir)
    assert "ERROR" not in chk.stdout, chk.stdout[-3000:]
