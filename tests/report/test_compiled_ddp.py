"""torch.compile'd DDP: its steps' iterations and bucket numbers are the eager ones
(tests/report/compiled_ddp_buckets.py). Dynamo compiled commtrace's DDP.forward wrapper and
replayed its side effects as constants: every step had iteration 1, and the gradient buckets
were numbered on across steps (0, then 1..8 where each step has 0..3)."""
from __future__ import annotations

import os

import helpers as h
import pytest

from commtrace import torch_compat

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, LAYERS, LAYER_GRAD_BYTES = 3, 4, (512 * 512 + 512) * 4  # as compiled_ddp_buckets.py


def _run(tmp, traced: bool) -> str:
    out = tmp / ("traced" if traced else "plain")
    args = [os.path.join(HERE, "compiled_ddp_buckets.py"), h.free_port(), out]
    h.run(h.commtrace_cmd(tmp / "run", *args) if traced else [h.PY, *args], timeout=400).check(0)
    return out.read_text()


# commtrace keeps its DDP.forward wrapper out of compilation only where torch has per-code
# strategies (README, Known limitations: "labels of compiled DDP may be wrong there").
@pytest.mark.skipif(torch_compat.dynamo_code_skipper(False) is None,
                    reason="this torch has no per-code Dynamo strategies (set_code_exec_strategy, 2.5+): "
                           "compiled DDP's labels are not kept")
def test_compiled_ddp_buckets_numbered_per_step(tmp_path):
    assert _run(tmp_path, True) == _run(tmp_path, False)
    df = h.load(tmp_path / "run")
    for r in range(2):
        d = df[(df["rank"] == r) & (df["op"] == "all_reduce") & (df["phase"] == "backward")]
        got = [(int(i), int(b), int(n)) for i, b, n in zip(d["iteration"], d["bucket"], d["bytes"])]
        # step 1: every gradient in one bucket; then DDP's rebuilt buckets, one per layer
        want = [(1, 0, LAYERS * LAYER_GRAD_BYTES)]
        want += [(i, b, LAYER_GRAD_BYTES) for i in range(2, STEPS + 1) for b in range(LAYERS)]
        assert got == want, (r, got)
        rebuild = df[(df["rank"] == r) & (df["detail"] == "bucket_rebuild")]
        assert set(rebuild["iteration"]) == {2} and set(rebuild["phase"].astype(str)) == {"forward"}
