"""Differences between the torch releases commtrace supports, in one place (C++: torch_compat.h).

Code elsewhere asks here for a feature by name, never compares versions. This module
imports nothing of commtrace, and torch only inside functions (``commtrace run`` checks
the release before the program imports torch).
"""
from __future__ import annotations

import functools
import re
import sys
import types

SUPPORTED = ((2, 4), (2, 15))  # the oldest and newest minor release tested (make test-compat)


@functools.lru_cache(maxsize=None)
def version_string() -> str:
    """The installed torch's version ("2.15.0+cpu"), from its metadata: no import of torch."""
    import importlib.metadata
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch
        return torch.__version__


def unsupported_reason(installed: str | None = None) -> str | None:
    """One line saying why this torch (or the version string ``installed``) is outside
    the tested range, or None."""
    text = version_string() if installed is None else installed
    m = re.match(r"(\d+)\.(\d+)", text)
    v = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if SUPPORTED[0] <= v <= SUPPORTED[1]:
        return None
    lo, hi = (f"{a}.{b}" for a, b in SUPPORTED)
    side = "older" if v < SUPPORTED[0] else "newer"
    return (f"torch {text} is {side} than the releases commtrace is tested with "
            f"({lo} to {hi}); tracing what it can")


# -- c10d options ---------------------------------------------------------------------------------
# Every c10d Options type. An op's options are recognised by type, not by a field:
# asyncOp is on every Options type from 2.8 only (before: Broadcast, Allgather,
# Scatter, ReduceScatter).
@functools.lru_cache(maxsize=None)
def options_types() -> frozenset:
    """Every Options class of c10d's bindings (AllgatherOptions & co. are not all
    re-exported by torch.distributed)."""
    from torch._C import _distributed_c10d as c10d
    return frozenset(getattr(c10d, n) for n in dir(c10d)
                     if n.endswith("Options") and isinstance(getattr(c10d, n), type))


def has_async_op(options_type) -> bool:
    """Options of this type carry ``asyncOp`` on the installed torch (hot paths
    ask once, at import, and read the field directly)."""
    return hasattr(options_type, "asyncOp")


def c10d_passes_async_op(options_names) -> bool:
    """torch.distributed's collectives hand the group their ``async_op`` (``opts.asyncOp``): from
    2.8, when each of their Options types (``options_names``) got the field. Before, some types lack
    it, and not every function whose type has it passes it on (2.4: all_gather passes no Options;
    reduce_scatter and all_gather_coalesced leave asyncOp at its default, True)."""
    from torch._C import _distributed_c10d as c10d
    return all(has_async_op(getattr(c10d, n)) for n in options_names if hasattr(c10d, n))


def make_options(options_type, async_op: bool | None = None, **fields):
    """An Options object with ``fields`` set, and ``asyncOp`` where this torch's type
    has it (before 2.8 a blocking call cannot say so: the caller just waits)."""
    o = options_type()
    if async_op is not None and has_async_op(options_type):
        o.asyncOp = async_op
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def async_op(opts) -> bool:
    """Whether the caller may return before the op ends (``opts.asyncOp``). An
    Options type without that field says nothing: the op counts as asynchronous,
    timed by its Work, which is exact either way."""
    return getattr(opts, "asyncOp", True)


# -- ProcessGroup methods -------------------------------------------------------------------------
# ProcessGroup methods (or C++ trampoline names) that releases added, each with the
# first release that has it: a torch before it has no such method, and nothing
# calls it there. 2.13: the single-tensor virtuals its bindings of _allgather_base
# & co. dispatch to; 2.15: the single-tensor gather.
ADDED_METHODS = {
    **dict.fromkeys(("all_gather_single", "all_gather_single_coalesced", "reduce_scatter_single",
                     "reduce_scatter_single_coalesced", "all_to_all_single"), (2, 13)),
    "gather_single": (2, 15), "gather_into_tensor": (2, 15),
}


# -- Flight Recorder ------------------------------------------------------------------------------
def has_flight_recorder() -> bool:
    """c10d's backend-independent Flight Recorder exists (gloo records into it; its
    dump is ``_dump_fr_trace_json``). torch 2.4 has only NCCL's trace buffer."""
    from torch._C import _distributed_c10d as c10d
    return hasattr(c10d, "_dump_fr_trace_json")


# -- FSDP2 ----------------------------------------------------------------------------------------
def fully_shard():
    """FSDP2's ``fully_shard``: public in ``torch.distributed.fsdp`` from 2.6, before
    that only in ``torch.distributed._composable.fsdp``."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def fsdp2_state_module(state):
    """The module an FSDP2 ``FSDPState`` manages (its first, when ``fully_shard`` got a
    list): ``_modules`` in torch >= 2.6, ``_module`` before; None if neither."""
    modules = getattr(state, "_modules", None)
    if modules:
        return modules[0]
    return getattr(state, "_module", None)


# -- stores ---------------------------------------------------------------------------------------
def real_store(store):
    """``store``, or None where it stores nothing: torch < 2.5 registers an mpi
    group with a PrefixStore over no store at all, and using that crashes the
    process (a null pointer inside PrefixStore)."""
    import torch.distributed as dist
    s = store
    while isinstance(s, dist.PrefixStore):
        try:
            s = s.underlying_store
        except (AttributeError, RuntimeError):
            return store
    return None if s is None else store


# -- Dynamo ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)  # comm_hooks wraps a callback per bucket: looked up once
def dynamo_code_skipper(callees: bool):
    """A function that marks a code object for Dynamo to skip: its frames, and with ``callees``
    the frames they call too (else those are compiled as usual). None where this torch has no
    per-code strategies (``set_code_exec_strategy``, 2.5+) or its private API differs."""
    try:
        from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
        strategy = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP if callees else _FrameAction.DEFAULT)
    except Exception:
        return None
    return lambda code: set_code_exec_strategy(code, strategy)


# -- TorchScript ----------------------------------------------------------------------------------
def alias_script_builtin(wrapper, orig):
    """TorchScript resolves a function a scripted body calls to a builtin op by the function's
    identity (``torch.jit._builtins``: a table built on first use, in torch 2.13 already while
    torch imports). Makes ``wrapper``, put in ``orig``'s place as a module attribute, resolve to
    ``orig``'s op (``torch.distributed.autograd.backward``: ``aten::dist_backward``); without it a
    script calling the attribute fails to compile. Returns a handle whose ``remove()`` undoes it
    (the wrapper's id must not outlive the wrapper there), or None: table not built yet (it will
    read the wrapper from the module), ``orig`` no builtin, or this torch lacks the table."""
    try:
        from torch.jit import _builtins
    except ImportError:
        return None
    table = getattr(_builtins, "_builtin_table", None)
    if not isinstance(table, dict) or id(orig) not in table:
        return None
    key, op = id(wrapper), table[id(orig)]
    table[key] = op

    def remove() -> None:
        if table.get(key) == op:
            del table[key]
    # holds the wrapper: alive while aliased, its id not reused meanwhile
    return types.SimpleNamespace(remove=remove, wrapper=wrapper)


# -- torch's distributed test harness -------------------------------------------------------------
def distributed_test_skip(exit_code) -> str | None:
    """The reason a rank of torch's distributed test harness (``MultiProcessTestCase``) skipped its
    test, where ``exit_code`` is one of its ``TEST_SKIPS`` codes (e.g. 81: too few GPUs) and the
    process has that harness loaded; else None. Its ranks exit so to skip, not to fail."""
    harness = sys.modules.get("torch.testing._internal.common_distributed")
    skips = getattr(harness, "TEST_SKIPS", None)
    if not isinstance(exit_code, int) or exit_code == 0 or not isinstance(skips, dict):
        return None
    for skip in skips.values():
        if getattr(skip, "exit_code", None) == exit_code:
            return str(getattr(skip, "message", "") or "skipped")
    return None
