"""The installed torch's ProcessGroup API is fully classified, and traced methods reach the wrapper."""
from __future__ import annotations

import torch.distributed as dist

from commtrace import torch_compat
from commtrace.capture import ops
from commtrace.capture.wrapper import TracedProcessGroup


def test_every_processgroup_attribute_is_traced_or_listed():
    api = ops.processgroup_api()
    assert "allreduce" in api and "barrier" in api
    unknown = [n for n in api if n not in ops.SPECS and n not in ops.NOT_OPS]
    assert not unknown, f"ProcessGroup attributes neither traced nor in ops.NOT_OPS: {unknown}"
    assert not set(ops.SPECS) & ops.NOT_OPS


def test_traced_methods_are_overridden_by_the_wrapper():
    for name, spec in ops.SPECS.items():
        own = TracedProcessGroup.__dict__.get(name)
        assert own is not None, f"{name} is not overridden: calls would reach the inner backend untraced"
        assert own is not getattr(dist.ProcessGroup, name, None)
        assert getattr(TracedProcessGroup, name) is own  # nothing in between shadows it
        assert callable(own) and spec.op in ops.SPECS[name].op


def test_specs_name_real_methods_or_trampoline_names():
    api = set(ops.processgroup_api())
    # Names the C++ trampoline looks up in Python that pybind does not expose on the class.
    missing = {n for n in ops.SPECS if n not in api}
    missing -= set(torch_compat.ADDED_METHODS)  # a torch before them never calls them
    assert not missing, missing
    # and every method a release added is traced
    assert set(torch_compat.ADDED_METHODS) <= set(ops.SPECS)
