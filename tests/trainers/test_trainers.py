"""The trainers people use, traced on gloo, CPU, 2 ranks: steps, micro-steps and
compute spans equal what the trainer ran, and tracing changes no loss.

Each program (programs/) runs once untraced and once under ``commtrace run``,
writing every micro-batch's loss per rank. Expected numbers, by hand, per rank:

* plain loop, accelerate, Lightning automatic (torchrun "ddp" and "ddp_spawn"),
  HF Trainer: 2 optimizer steps of 2 micro-batches (accumulation 2): 4 forwards,
  4 backward passes, 2 optimizer steps; micro-steps [2, 2]. Gradients are
  all-reduced only in the last micro-batch of a step (the first runs under
  ``no_sync()``), and each model fits one DDP bucket: 2 gradient all_reduces.
* Lightning manual optimization: 4 batches, each its own optimizer step: 4
  forwards, 4 backwards, 4 optimizer steps; micro-steps [1, 1, 1, 1]; 4 gradient
  all_reduces.

Under Lightning's automatic optimization the last micro-batch's forward and
backward run inside ``optimizer.step(closure)``; under manual optimization the
backward and the optimizer step run inside the DDP forward (``training_step``).
Both nestings used to hide spans (one forward per step; no backward or optimizer
span at all): see capture/phases.py.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")

ACCUMULATED = {"spans": {"forward": 4, "backward": 4, "optimizer": 2}, "micro": [2, 2], "grad_all_reduce": 2}
MANUAL = {"spans": {"forward": 4, "backward": 4, "optimizer": 4}, "micro": [1, 1, 1, 1], "grad_all_reduce": 4}

# name: (module the program needs, launcher, program and its arguments after OUT, expected per rank)
CASES = {
    "plain": ("torch", "torchrun", ["plain_loop.py"], ACCUMULATED),
    "lightning-auto-ddp": ("lightning", "torchrun", ["lightning_fit.py", "auto", "ddp"], ACCUMULATED),
    "lightning-manual-ddp": ("lightning", "torchrun", ["lightning_fit.py", "manual", "ddp"], MANUAL),
    "lightning-auto-spawn": ("lightning", "python", ["lightning_fit.py", "auto", "ddp_spawn"], ACCUMULATED),
    "accelerate": ("accelerate", "torchrun", ["accelerate_loop.py"], ACCUMULATED),
    "hf-trainer": ("transformers", "torchrun", ["hf_trainer.py"], ACCUMULATED),
}
TIMEOUT = 240


def _launch(launcher: str, program: list, out: str, traced_dir: str | None, cwd: str, module: str) -> h.Result:
    script = [os.path.join(PROGRAMS, program[0]), out, *program[1:]]
    trace = [] if traced_dir is None else ["-m", "commtrace", "run", "-o", traced_dir]
    port = h.free_port()
    if launcher == "torchrun":
        cmd, rendezvous = [h.TORCHRUN, "--nproc_per_node", "2", "--master-port", str(port), *trace, *script], {}
    else:                                   # the program starts its ranks itself, on MASTER_PORT (Lightning's
        cmd, rendezvous = [h.PY, *trace, *script], {"MASTER_PORT": port}   # own pick: a bind to port 0)
    env = h.clean_env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                      TOKENIZERS_PARALLELISM="false", **rendezvous)
    res = h.run(cmd, timeout=TIMEOUT, env=env, cwd=cwd)
    if traced_dir is None and res.returncode != 0 and ("ImportError" in res.stderr or "ModuleNotFoundError" in res.stderr):
        # untraced, nothing of commtrace runs: the trainer does not import here (e.g. an old torch)
        last = [line for line in res.stderr.splitlines() if "Error" in line][-1]
        pytest.skip(f"{module} does not import here: {last.strip()}")
    return res.check()


def _losses(out: str) -> list:
    return [json.loads(open(f"{out}.rank{r}").read()) for r in range(2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs(name)``: (untraced losses, traced losses, traced run dir), launched once."""
    cache: dict = {}

    def get(name):
        if name not in cache:
            module, launcher, program, _ = CASES[name]
            tmp = tmp_path_factory.mktemp(name)
            plain, traced = tmp / "plain", tmp / "traced"   # each its own directory: they run at once
            plain.mkdir()
            traced.mkdir()
            h.concurrently(lambda: _launch(launcher, program, str(plain / "out"), None, str(plain), module),
                           lambda: _launch(launcher, program, str(traced / "out"), str(tmp / "run"), str(traced),
                                           module))
            cache[name] = (_losses(str(plain / "out")), _losses(str(traced / "out")), str(tmp / "run"))
        return cache[name]
    return get


def _needs(module: str) -> None:
    """Skip when the trainer is not installed. Not imported here (heavy, and it would
    stay in this test process): a trainer that does not import skips in its untraced run."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


@pytest.mark.parametrize("name", list(CASES))
def test_trainer_steps_spans_and_losses(name, runs, tmp_path):
    module, _, _, expected = CASES[name]
    _needs(module)
    plain, traced, run_dir = runs(name)
    micro_batches = sum(expected["micro"])
    assert [len(x) for x in plain] == [micro_batches] * 2, plain
    assert traced == plain                          # tracing changes no loss, bit for bit

    import commtrace
    spans = commtrace.load(run_dir, table="spans")
    for rank in (0, 1):
        mine = spans[spans["rank"] == rank]
        counts = {p: int((mine["phase"] == p).sum()) for p in ("forward", "backward", "optimizer")}
        assert counts == expected["spans"], (rank, counts)
        # every training forward and backward belongs to a step (steps 1..n)
        assert sorted(mine["step"].unique().tolist()) == list(range(1, len(expected["micro"]) + 1))

    ops = h.load(run_dir)
    grads = ops[(ops["phase"] == "backward") & (ops["op"] == "all_reduce") & ops["bucket"].notna()]
    assert grads.groupby("rank").size().to_dict() == {0: expected["grad_all_reduce"], 1: expected["grad_all_reduce"]}

    from commtrace.cli import main
    js = tmp_path / "report.json"
    assert main(["report", run_dir, "--json", str(js), "-q"]) == 0
    steps = json.loads(js.read_text())["steps"]
    assert [s["micro_steps"] for s in steps] == expected["micro"]
    assert [s["step"] for s in steps] == list(range(1, len(expected["micro"]) + 1))
    assert all(s["ranks"] == 2 for s in steps)
