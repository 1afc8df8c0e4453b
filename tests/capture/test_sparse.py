"""Sparse tensors are counted at the bytes a rank passes (indices + values, from its nnz), per op:
a plain sparse all_reduce whose nnz differs between ranks and calls, and DDP's sparse gradients
(``nn.Embedding(sparse=True)``), on 2 spawned gloo ranks, through both wrappers. Before, every op
was counted at the dense shape's size (50 x 4 float32: 800 B), and DDP's were read after gloo had
written the result (the union of both ranks' rows) into the tensor."""
from __future__ import annotations


import pytest

import helpers as h

COO_BYTES_PER_NNZ = 8 + 4 * 4  # one int64 index (sparse_dim 1) + 4 float32 values per row


@pytest.mark.parametrize("wrapper", ["native", "python"])
def test_sparse_all_reduce_counts_each_ranks_nnz(tmp_path, wrapper):
    if wrapper == "native":
        h.ensure_native_wrapper()
    env = h.clean_env(**({"COMMTRACE_NATIVE": "0"} if wrapper == "python" else {}))
    run = h.spawn_traced("sparse.py", 2, tmp_path, timeout=120, env=env)
    run.result.check(0)
    assert h.group_wrappers(run.run_dir) == {wrapper}
    df = run.frame
    for r in range(2):
        got = run.rank_json(r)
        rows = df[(df["rank"] == r) & (df["op"] == "all_reduce")].sort_values("seq")
        expected = [COO_BYTES_PER_NNZ * n for n in got["nnz"] + got["lookups"]]
        assert rows["bytes"].tolist() == expected, (r, rows[["seq", "phase", "bytes"]])
        assert rows["shapes"].tolist() == ["[[50,4]]"] * 4   # the dense shape: what the members must agree on
        assert set(rows["status"].astype(str)) == {"completed"}
    # different per-rank sizes of one collective are no desync
    chk = h.commtrace_main("check", run.run_dir)
    assert chk.returncode == 0, chk.stdout + chk.stderr
    assert "mismatch" not in chk.stdout
