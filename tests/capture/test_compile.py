"""torch.compile under commtrace run: a compiled DDP model and a compiled
functional all_reduce train and compute bitwise identically traced and untraced,
and their collectives are recorded (DDP's from C++ during compiled code)."""
from __future__ import annotations

import helpers as h
from helpers import worker


def _run(tmp, traced: bool, script: str = "compiled_ddp.py") -> str:
    out = tmp / ("traced" if traced else "plain")
    args = [worker(script), h.free_port(), out]
    h.run(h.commtrace_cmd(tmp / "run", *args) if traced else [h.PY, *args], timeout=300).check(0)
    return out.read_text()


def test_compiled_ddp_and_functional_collective_traced(tmp_path):
    assert _run(tmp_path, True) == _run(tmp_path, False)
    df = h.load(tmp_path / "run")
    assert set(df["status"]) == {"completed"}
    for r in range(2):
        d = df[df["rank"] == r]
        grads = d[(d["op"] == "all_reduce") & (d["phase"].astype(str) == "backward")]
        assert len(grads) == 3  # one bucket per step, issued by the reducer inside compiled code
        assert ((d["op"] == "all_reduce") & (d["phase"].isna())).sum() == 1  # the compiled functional one


def test_ddp_compiled_with_fullgraph_traced(tmp_path):
    """torch.compile(ddp_model, fullgraph=True) with Dynamo's python_reducer: Dynamo traces
    DDP.forward and the commtrace wrapper of its ``_pre_forward`` inside it; a graph break
    there failed the program traced ("Unsupported context manager"; found running torch's
    test_replicate_with_compiler.py traced: its test_compile_cpu compiles DDP so). Same
    outputs and parameters traced and untraced; DDP's construction is still recorded."""
    assert _run(tmp_path, True, "compiled_ddp_fullgraph.py") == _run(tmp_path, False, "compiled_ddp_fullgraph.py")
    df = h.load(tmp_path / "run")
    assert set(df["status"]) == {"completed"}
    assert (df["phase"].astype(str) == "ddp_init").sum() >= 2 * 2
