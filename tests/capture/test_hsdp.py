"""FSDP1 HYBRID_SHARD on 4 ranks (workers/hsdp.py, a 2x2 mesh): per step and rank the ops
equal torch's CommDebugMode's count, and each op's mesh dimension, role and module are
the ones counted by hand:

* forward: the root (Net: its head, 9 floats per rank = 36 B) and both blocks (36 floats
  per rank = 144 B) all_gather on the "shard" dimension;
* backward: the root stays unsharded; its pre-backward hook prefetches layers.1, whose own
  hook prefetches layers.0 (both named layers.1: the prefetched unit where no module runs,
  the issuing unit's hook); then per unit, layers.1, layers.0 and the root, a
  reduce_scatter of its whole gradient on "shard" (288 B, the root's 72 B) and an
  all_reduce of the shard on "replicate" (144 B, 36 B), named after the unit.
"""
import json
import os

import pytest

import commtrace
import helpers as h

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "hsdp.py")
STEP = [("forward", "all_gather", "shard", "fsdp_unshard", "Net", 36),
        ("forward", "all_gather", "shard", "fsdp_unshard", "layers.0", 144),
        ("forward", "all_gather", "shard", "fsdp_unshard", "layers.1", 144),
        ("backward", "all_gather", "shard", "fsdp_unshard", "layers.1", 144),
        ("backward", "all_gather", "shard", "fsdp_unshard", "layers.1", 144),
        *[("backward", op, dim, "fsdp_reduce_grad", unit, nbytes)
          for unit, full in (("layers.1", 288), ("layers.0", 288), ("Net", 72))
          for op, dim, nbytes in (("reduce_scatter", "shard", full), ("all_reduce", "replicate", full // 2))]]


def test_hybrid_shard_counts_and_labels(tmp_path):
    why = h.comm_debug_mode_lacks_modules()
    if why:
        pytest.skip(f"torch's public CommDebugMode is missing here: {why}")
    run, out = tmp_path / "run", tmp_path / "out"
    h.run(h.commtrace_cmd(run, WORKER, h.free_port(), out), timeout=300).check()
    df = commtrace.load(str(run))
    steps = commtrace.load(str(run), table="steps")
    for rank in range(4):
        counts = json.loads((tmp_path / f"out.{rank}.json").read_text())["counts"]
        d = df[(df["rank"] == rank) & df["phase"].isin(["forward", "backward"])].sort_values("t_start_ns")
        got = list(zip(d["phase"], d["op"], d["mesh_dim"].astype(str), d["detail"].astype(str),
                       d["module"].astype(str), d["bytes"]))
        assert got == STEP * 3, rank
        assert counts == [{"allgather_": 5, "_reduce_scatter_base_": 3, "allreduce_": 3}] * 3
        mine = steps[steps["rank"] == rank]
        assert list(mine["ops"]) == [len(STEP)] * 3 and list(mine["micro_steps"]) == [1] * 3
