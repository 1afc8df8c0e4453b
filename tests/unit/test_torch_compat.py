"""commtrace/torch_compat.py on the installed torch: what it detects, by asking torch."""
from __future__ import annotations

import pytest
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from commtrace import torch_compat


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
