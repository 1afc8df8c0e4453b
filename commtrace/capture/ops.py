"""The ProcessGroup methods commtrace traces, and how to read their arguments.

Each traced method has a ``Spec``: its c10d op and a parser of every pybind overload form
into ``(inputs, outputs, opts, extra)``: flat tensor lists (the rank passes ``inputs`` in),
the Options object or None, and op parameters a non-Options overload passed (root, reduce
op, tag, peer, split sizes). Parsers run only for a new call key, so may be thorough.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

Tensor = torch.Tensor


def flat(x) -> list:
    """Tensors in ``x`` (a tensor, or arbitrarily nested lists/tuples of them)."""
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in flat(item)]
    return []


_STRIDED = torch.strided
# A compressed sparse layout -> its two index tensors (torch's accessors for it).
_COMPRESSED = {torch.sparse_csr: ("crow_indices", "col_indices"), torch.sparse_bsr: ("crow_indices", "col_indices"),
               torch.sparse_csc: ("ccol_indices", "row_indices"), torch.sparse_bsc: ("ccol_indices", "row_indices")}


def nbytes(t: Tensor) -> int:
    """Bytes of what a rank passes as ``t``: a dense tensor's elements; a sparse one's stored parts
    (COO: indices and values; compressed layouts: both index tensors and values), from its nnz,
    not its dense shape."""
    if t.layout is _STRIDED:
        return t.numel() * t.element_size()
    if t.layout is torch.sparse_coo:
        parts = (t._indices(), t._values())
    elif t.layout in _COMPRESSED:
        parts = (*(getattr(t, n)() for n in _COMPRESSED[t.layout]), t.values())
    else:
        return t.numel() * t.element_size()  # mkldnn, ...: no c10d backend sends these
    return sum(p.numel() * p.element_size() for p in parts)


def sparse_call(args, kwargs) -> bool:
    """Whether an all_reduce's (first) tensor is sparse (the one op c10d backends take sparse
    tensors for: gloo's sparse all_reduce, DDP's sparse gradients)."""
    a = args[0] if args else kwargs.get("tensors", kwargs.get("tensor"))   # its tensor argument
    t = a[0] if type(a) is list and a else a
    return isinstance(t, Tensor) and t.layout is not _STRIDED


def sparse_key(args, kwargs) -> tuple:
    """What fixes a sparse all_reduce's bytes, for its call key: each of its tensors' ``nbytes``."""
    return tuple(map(nbytes, flat(args[0] if args else kwargs.get("tensors", kwargs.get("tensor")))))


def _is_opts(x) -> bool:
    return type(x).__name__.endswith("Options")


def _opts_or_extra(rest: list, kwargs: dict, extra_names: tuple[str, ...]):
    """Split trailing arguments into an Options object or named extras."""
    opts, extra = None, {}
    for i, v in enumerate(rest):
        if _is_opts(v):
            opts = v
        elif i < len(extra_names):
            extra[extra_names[i]] = v
    for k, v in kwargs.items():
        if k == "opts" or _is_opts(v):
            opts = v
        else:
            extra[k] = v
    return opts, extra


def parse_inplace(extra_names):
    """f(tensors|tensor, opts | extras...): the tensors are input and output (allreduce, broadcast...)."""
    def parse(args, kwargs):
        kw = dict(kwargs)
        ts = flat(args[0] if args else kw.pop("tensors", kw.pop("tensor", None)))
        return (ts, ts, *_opts_or_extra(list(args[1:]), kw, extra_names))
    return parse


def parse_out_in(extra_names=()):
    """f(outputs, inputs, opts | extras...) for every output-first method."""
    def parse(args, kwargs):
        kw = dict(kwargs)
        out = args[0] if len(args) > 0 else _pop_first(kw, "output_tensors", "output", "outputs", "outputTensor",
                                                        "output_lists", "output_tensor")
        inp = args[1] if len(args) > 1 else _pop_first(kw, "input_tensors", "input", "inputs", "inputTensor",
                                                       "input_list", "input_tensor")
        opts, extra = _opts_or_extra(list(args[2:]), kw, extra_names)
        return flat(inp), flat(out), opts, extra
    return parse


def _pop_first(kw, *names):
    for n in names:
        if n in kw:
            return kw.pop(n)
    return None


def parse_p2p(peer_name):
    def parse(args, kwargs):
        kw = dict(kwargs)
        ts = flat(args[0] if args else _pop_first(kw, "tensors", "arg0"))
        rest = list(args[1:])
        if peer_name is None:  # recv_anysource(tensors, tag)
            extra = {"tag": rest[0] if rest else _pop_first(kw, "tag", "arg1")}
        else:
            extra = {"peer": rest[0] if rest else _pop_first(kw, peer_name),
                     "tag": rest[1] if len(rest) > 1 else _pop_first(kw, "tag")}
        return ts, ts, None, extra
    return parse


@dataclass(frozen=True)
class Spec:
    op: str
    parse: Callable
    p2p: bool = False
    sparse: bool = False  # may take sparse tensors: their bytes are read before the op runs


_INPLACE_REDUCE = parse_inplace(("op", "timeout"))

# method name -> Spec. Names are the Python-visible ProcessGroup methods, plus the
# C++ trampoline names DDP and functional collectives reach (all_gather_single, ...).
SPECS: dict[str, Spec] = {
    # gloo writes a sparse all_reduce's result into its tensor (another nnz): described before it runs
    "allreduce": Spec("all_reduce", _INPLACE_REDUCE, sparse=True),
    "allreduce_coalesced": Spec("all_reduce", _INPLACE_REDUCE),
    "broadcast": Spec("broadcast", parse_inplace(("root", "timeout"))),
    "reduce": Spec("reduce", parse_inplace(("root", "op", "timeout"))),
    "allgather": Spec("all_gather", parse_out_in(("timeout",))),
    "allgather_coalesced": Spec("all_gather", parse_out_in()),
    "_allgather_base": Spec("all_gather", parse_out_in()),
    "all_gather_single": Spec("all_gather", parse_out_in()),
    "allgather_into_tensor_coalesced": Spec("all_gather", parse_out_in()),
    "all_gather_single_coalesced": Spec("all_gather", parse_out_in()),
    "gather": Spec("gather", parse_out_in(("root", "timeout"))),
    "gather_single": Spec("gather", parse_out_in()),        # torch 2.15
    "gather_into_tensor": Spec("gather", parse_out_in()),   # torch 2.15 (its deprecated alias)
    "scatter": Spec("scatter", parse_out_in(("root", "timeout"))),
    "reduce_scatter": Spec("reduce_scatter", parse_out_in(("op", "timeout"))),
    "_reduce_scatter_base": Spec("reduce_scatter", parse_out_in()),
    "reduce_scatter_single": Spec("reduce_scatter", parse_out_in()),
    "reduce_scatter_tensor_coalesced": Spec("reduce_scatter", parse_out_in()),
    "reduce_scatter_single_coalesced": Spec("reduce_scatter", parse_out_in()),
    "alltoall": Spec("all_to_all", parse_out_in()),
    "alltoall_base": Spec("all_to_all", parse_out_in(("output_split_sizes", "input_split_sizes", "opts"))),
    "all_to_all_single": Spec("all_to_all", parse_out_in(("output_split_sizes", "input_split_sizes", "opts"))),
    "barrier": Spec("barrier", lambda args, kw: ([], [], *_opts_or_extra(list(args), kw, ("timeout",)))),
    "monitored_barrier": Spec("barrier", lambda args, kwargs: ([], [], None, {})),
    "send": Spec("send", parse_p2p("dstRank"), p2p=True),
    "recv": Spec("recv", parse_p2p("srcRank"), p2p=True),
    "recv_anysource": Spec("recv", parse_p2p(None), p2p=True),
}

# ProcessGroup attributes that are not communication ops. The API test fails on
# any attribute of the installed torch's ProcessGroup that is in neither set.
NOT_OPS = frozenset({
    "BackendType", "CUSTOM", "GLOO", "MPI", "NCCL", "UCC", "UNDEFINED", "XCCL",
    "_backend_id", "_device_types", "_enable_collectives_timing", "_get_backend",
    "_get_backend_name", "_get_sequence_number_for_group", "_has_hooks", "_id",
    "_pybind11_conduit_v1_", "_register_backend", "_register_on_completion_hook",
    "_set_default_backend", "_set_group_desc", "_set_group_name",
    "_set_sequence_number_for_group", "_start_coalescing", "_end_coalescing",
    "_wait_for_pending_works", "abort", "bound_device_id", "boxed", "group_desc",
    "group_name", "get_group_store", "merge_remote_group", "name", "rank",
    "set_timeout", "shutdown", "size", "split_group", "unbox",
    "use_pg_for_symm_mem_rendezvous",
    "Options", "options",  # torch < 2.6: the group's own options class and object
    # torch 2.15: timeouts, fault tolerance (reconfigure), one-sided windows and hooks;
    # the wrapper leaves them to the backends it mirrors (torch forwards them there)
    "_add_ephemeral_timeout", "get_backend", "get_reconfigure_handle", "new_window", "reconfigure",
    "register_abort_hook", "register_post_hook", "register_pre_hook", "supports_abort_hooks",
    "supports_completion_hooks", "supports_reconfigure", "supports_window", "unregister_abort_hook",
    "unregister_post_hook", "unregister_pre_hook",
})


def reduce_op_name(op) -> str | None:
    inner = getattr(op, "op", op)
    return None if op is None else str(getattr(inner, "name", None) or str(inner).rsplit(".", 1)[-1])


def _one(values: set, many="mixed"):
    """The one value in ``values``, ``many`` if several, None if none."""
    return values.pop() if len(values) == 1 else (many if values else None)


def describe(method: str, spec: Spec, args, kwargs, group_ranks: list[int]) -> dict:
    """Full static description of one call (becomes a ``sig`` meta line)."""
    inputs, outputs, opts, extra = spec.parse(args, kwargs)
    both = inputs + outputs
    d: dict = {"op": spec.op, "variant": method, "shapes": [list(t.shape) for t in inputs],
               "out_shapes": [list(t.shape) for t in outputs],
               "dtype": _one({str(t.dtype).replace("torch.", "") for t in both}),
               "bytes": int(sum(map(nbytes, inputs))),
               "out_bytes": int(sum(map(nbytes, outputs))),
               "device": _one({t.device.type for t in both}),
               # not written: see Recorder.add_sig
               "cuda_index": _one({t.device.index for t in both if t.is_cuda}, None)}
    sparse = {str(t.layout).replace("torch.", "") for t in both if t.layout is not _STRIDED}
    if sparse:  # bytes are then per op (the call key holds the nnz): docs/trace-format.md, ``sig``
        d["layout"] = _one(sparse)
    red = getattr(opts, "reduceOp", None) if opts is not None else extra.get("op")
    reduces = spec.op in ("all_reduce", "reduce", "reduce_scatter")
    d["reduce_op"] = (reduce_op_name(red) or "SUM") if reduces else None
    root = None
    if spec.op in ("broadcast", "reduce", "gather", "scatter"):
        root = getattr(opts, "rootRank", None) if opts is not None else extra.get("root")
        root = 0 if root is None else root
    elif spec.p2p:
        root = extra.get("peer")
    if root is not None and group_ranks and 0 <= int(root) < len(group_ranks):
        root = group_ranks[int(root)]  # group rank -> global rank
    d["root"] = None if root is None else int(root)
    d["tag"] = int(extra["tag"]) if spec.p2p and extra.get("tag") is not None else None
    if "output_split_sizes" in extra or "input_split_sizes" in extra:
        d["out_splits"] = [int(x) for x in extra.get("output_split_sizes") or []]
        d["in_splits"] = [int(x) for x in extra.get("input_split_sizes") or []]
    if opts is not None:
        d["async"] = bool(getattr(opts, "asyncOp", True))
    else:  # a call without Options gets the binding's default Options: asyncOp=True; a p2p
        # op hands its Work to the caller (dist.send/recv's wait: phases.LABELLED_CALLS).
        # The context's ``async`` (phases: torch.distributed's own calls) overrides both.
        d["async"] = None if method == "monitored_barrier" else True
    return d


def processgroup_api() -> list[str]:
    """Every public-ish attribute of the installed torch's ProcessGroup."""
    return sorted(n for n in dir(dist.ProcessGroup) if not n.startswith("__"))
