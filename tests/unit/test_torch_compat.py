"""commtrace/torch_compat.py on the installed torch: what it detects, by asking torch."""
from __future__ import annotations

import os
import sys

import pytest
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from commtrace import torch_compat

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402


def test_the_supported_range_is_said_in_one_line():
    assert torch_compat.unsupported_reason("2.4.1") is None
    assert torch_compat.unsupported_reason("2.15.0+cu130") is None
    old = torch_compat.unsupported_reason("2.3.1")
    new = torch_compat.unsupported_reason("2.16.0.dev20261201")
    assert old == "torch 2.3.1 is older than the releases commtrace is tested with (2.4 to 2.15); tracing what it can"
    assert new.startswith("torch 2.16.0.dev20261201 is newer than") and "\n" not in new


def test_options_are_recognised_by_type_with_or_without_async_op():
    types = torch_compat.options_types()
    assert {dist.AllreduceOptions, dist.BroadcastOptions, c10d.AllgatherOptions, c10d.BarrierOptions} <= types
    o = dist.BroadcastOptions()          # has asyncOp on every supported release
    o.asyncOp = False
    assert torch_compat.async_op(o) is False
    a = dist.AllreduceOptions()          # asyncOp from 2.8 only
    assert torch_compat.async_op(a) is True
    assert torch_compat.has_async_op(dist.AllreduceOptions) == hasattr(a, "asyncOp")
    assert torch_compat.async_op(None) is True   # positional call forms pass no options


def test_a_prefix_store_over_a_real_store_is_kept():
    real = dist.HashStore()
    p = dist.PrefixStore("a/", dist.PrefixStore("b/", real))
    assert torch_compat.real_store(p) is p
    assert torch_compat.real_store(None) is None


def test_a_prefix_store_over_no_store_is_none():
    try:
        empty = dist.PrefixStore("default_pg/", None)   # what torch < 2.5 registers for an mpi group
    except (ValueError, TypeError):
        pytest.skip("this torch refuses a PrefixStore over no store (so never registers one)")
    assert torch_compat.real_store(empty) is None


# fully_shard on a one-rank gloo group (in a child: this process keeps no group). Building
# needs no training, which torch 2.4's FSDP2 cannot do on CPU (the capture tests skip there).
_FSDP2_STATE = """
import os, sys, torch, torch.distributed as d
from torch.distributed.device_mesh import init_device_mesh
from commtrace import torch_compat
d.init_process_group("gloo", store=d.HashStore(), rank=0, world_size=1)
fully_shard = torch_compat.fully_shard()
model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
mesh = init_device_mesh("cpu", (1,))
fully_shard(model[0], mesh=mesh)
fully_shard(model, mesh=mesh)
state = fully_shard.state(model)
print(type(state).__module__, "_pre_backward" in vars(type(state)),
      torch_compat.fsdp2_state_module(state) is model,
      torch_compat.fsdp2_state_module(fully_shard.state(model[0])) is model[0])
sys.stdout.flush()
os._exit(0)
"""


def test_an_fsdp2_state_names_its_module_and_has_the_pre_backward_the_tracker_patches():
    res = h.run([h.PY, "-c", _FSDP2_STATE], env=h.clean_env(), timeout=120).check(0)
    module, has_pre_backward, root, unit = h.without_gloo_log(res.stdout).split()
    # the FSDPState modules capture/module_tracker.py patches (torch >= 2.6; before)
    assert module in ("torch.distributed.fsdp._fully_shard._fsdp_state",
                      "torch.distributed._composable.fsdp._fsdp_state")
    assert (has_pre_backward, root, unit) == ("True", "True", "True")
