"""The commtrace trace format: the one place that defines what is on disk
(docs/trace-format.md describes it for other readers).

Per process, files sharing a stem: ``proc.<host>.pid<P>`` until the process creates its
first process group, then renamed ``rank<R>.pid<P>`` (a process that never does keeps
the first name, has ``rank`` null and no ops file; the one that does writes a second
``header`` line, and readers merge header lines, later values winning).
``<stem>.meta.jsonl`` is append-only JSON Lines, each with a ``"type"`` (readers ignore
unknown types): the header, the interned ``sig``/``group`` definitions records refer
to, and per-process facts. ``<stem>.ops.bin`` holds fixed-size little-endian
``OP_RECORD``s (``numpy.fromfile``); a torn trailing record is ignored. Times are ns of
the process's CLOCK_MONOTONIC; ``clock`` lines give the offset to rank 0's clock.
An op still running at a flush may be written ``IN_FLIGHT`` and again when it ends:
readers keep the last record of each (t_call, group, seq, sig).

Bounded mode (``--keep-last N`` / ``--steps A:B``) keeps these layouts: ``keep_last``
rotates ops and spans files into ``<file>.1`` at N records (at most 2N on disk, at least
the last N), and ``<stem>.coverage.json`` (rewritten whole at every flush) says what the
files cover. Version history: 1 -- initial; the header's ``bounded`` field, the ring
segments, ``*.coverage.json``, the C++ layer's ``<stem>.mpi.bin`` and span phase 3
(``schedule``) were added without a version change: a reader that does not know them
reads a valid subset (the reader skips spans of a phase it does not know).
"""
from __future__ import annotations

from dataclasses import dataclass

FORMAT_NAME = "commtrace"
FORMAT_VERSION = 1

META_SUFFIX = ".meta.jsonl"
OPS_SUFFIX = ".ops.bin"
SPANS_SUFFIX = ".spans.bin"
PREVIOUS_SEGMENT = ".1"              # bounded mode: <stem>.ops.bin.1 / .spans.bin.1, the previous ring segment
COVERAGE_SUFFIX = ".coverage.json"   # bounded mode: what the files cover (rewritten whole at every flush)
COVERAGE_TYPE = "commtrace-coverage"
# C++ layer only (<stem> = rank<R>.pid<P>.cpp): OP_RECORDs of the ops that made MPI
# calls, d_return / d_end = first MPI call began / last one returned (from t_call).
MPI_CALLS_SUFFIX = ".mpi.bin"
_FILE_SUFFIXES = (META_SUFFIX, OPS_SUFFIX, SPANS_SUFFIX, COVERAGE_SUFFIX, MPI_CALLS_SUFFIX)


def int_or_none(v) -> int | None:
    """A JSON field of an untrusted file as an int (a bool is none), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def list_or_empty(v) -> list:
    """A JSON field of an untrusted file as a list, else []."""
    return v if isinstance(v, list) else []


def stem_of(name: str) -> str:
    """The stem of one of a process's file names ("rank1.pid7.ops.bin.1" -> "rank1.pid7");
    a name with no suffix of this format as it is."""
    base = name[: -len(PREVIOUS_SEGMENT)] if name.endswith(PREVIOUS_SEGMENT) else name
    for suffix in _FILE_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return name


def rank_in_name(name: str) -> int | None:
    """The rank a file's name gives (stem ``rank<R>.pid<P>``...; None for a rank-less
    process's name): all there is to say which rank a file is when its header cannot be read."""
    head, _, rest = name.partition(".pid")
    if not (rest and head.startswith("rank") and head[4:].isdigit() and head[4:].isascii()):
        return None
    pid = rest.split(".", 1)[0]
    return int(head[4:]) if pid.isdigit() else None

# Environment variables shared by the launcher, children and the C++ patch.
ENV_DIR = "COMMTRACE_DIR"          # absolute run directory; its presence turns tracing on
ENV_RUN_ID = "COMMTRACE_RUN_ID"    # run id shared by every process of the run
ENV_LAUNCHER = "COMMTRACE_LAUNCHER"
ENV_COMMAND = "COMMTRACE_COMMAND"  # the traced command line (JSON list), inherited by spawned ranks
ENV_KEEP_LAST = "COMMTRACE_KEEP_LAST"  # bounded mode: keep the last N ops per process (ring)
ENV_STEPS = "COMMTRACE_STEPS"          # bounded mode: optimizer steps recorded in detail ("A:B", "every:K")

# The op record layout (numpy dtype ``OP_RECORD``, built on first use: every
# traced process imports this module at start, and most never need numpy).
OP_RECORD_FIELDS = (
    ("t_call", "<i8"),     # monotonic ns when the op was called (C++: enqueued)
    ("d_return", "<f4"),   # ns from call to return to the caller (C++: to dequeue)
    ("d_end", "<f4"),      # ns from call to completion of the work; NaN = unknown
    ("seq", "<u4"),        # per-group sequence number (collectives) / per-peer (p2p)
    ("sig", "<u4"),        # id of a "sig" meta line
    ("iteration", "<u4"),  # training step of the DDP module, 0 = none
    ("group", "<u2"),      # id of a "group" meta line
    ("status", "u1"),      # STATUS_* below
    ("flags", "u1"),       # FLAG_* below
)
RECORD_SIZE = 32


# Compute span records (``<stem>.spans.bin``, numpy dtype ``SPAN_RECORD``): every
# outermost DDP forward, backward pass, optimizer step and pipeline schedule step() of the process.
SPAN_RECORD_FIELDS = (
    ("t_begin", "<i8"),    # monotonic ns
    ("t_end", "<i8"),
    ("step", "<u4"),       # the optimizer step the span belongs to, from 1 (capture.phases.StepCounter)
    ("iteration", "<u4"),  # DDP forwards so far (as in op records)
    ("label", "<u4"),      # id of a "label" meta line (DDP module label, optimizer class); SPAN_NO_LABEL = none
    ("phase", "u1"),       # index into SPAN_PHASES
    ("flags", "u1"),       # SPAN_FLAG_*
    ("reserved", "<u2"),
)
SPAN_RECORD_SIZE = 32
# "schedule": a pipeline schedule's outermost step() call; not compute: it bounds the step (capture.pipeline)
SPAN_PHASES = ("forward", "backward", "optimizer", "schedule")
SPAN_FLAG_GRAD = 0x01      # forward, schedule: autograd was enabled (not set: evaluation); others: always set
SPAN_NO_LABEL = 0xFFFFFFFF

_DTYPES = {"OP_RECORD": (OP_RECORD_FIELDS, RECORD_SIZE), "SPAN_RECORD": (SPAN_RECORD_FIELDS, SPAN_RECORD_SIZE)}


def __getattr__(name):
    if name in _DTYPES:
        import numpy as np
        fields, size = _DTYPES[name]
        dtype = np.dtype(list(fields))
        assert dtype.itemsize == size
        globals()[name] = dtype
        return dtype
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


STATUS_COMPLETED = 0
STATUS_FAILED = 1
STATUS_IN_FLIGHT = 2
STATUS_NAMES = {STATUS_COMPLETED: "completed", STATUS_FAILED: "failed", STATUS_IN_FLIGHT: "in_flight"}

FLAG_SOURCE_MASK = 0x03
FLAG_SOURCE_PYTHON = 0x00  # the Python ProcessGroup wrapper
FLAG_SOURCE_CPP = 0x01     # the ProcessGroupMPI.cpp patch (t_call=enqueue, d_return=dequeue)
SOURCE_NAMES = {FLAG_SOURCE_PYTHON: "python", FLAG_SOURCE_CPP: "cpp"}
# t_end is when completion was first *observed* (polling), an upper bound, not
# the moment the backend finished: set for small async ops, whose exact
# completion time would cost a GIL-taking callback on the backend's thread.
FLAG_END_OBSERVED = 0x04



@dataclass(frozen=True)
class OpKind:
    """What the analysis and the views need to know about one c10d op: read from
    ``OP_KINDS`` by the matcher, summary, check and both renderers, so a new
    collective is one row here.

    ``p2p``: point-to-point (matched by pairs, not by group seq). ``total_size``: its
    nccl-tests size is the larger of its input and output bytes (the whole gathered
    or scattered buffer), not its input. ``bus``: the bus-bandwidth factor is
    ``bus * (n - 1) / n`` over n ranks (nccl-tests), 1 when ``bus`` is 0.
    ``letter``, ``color``, ``html``: its symbol and colour in the terminal timeline and tables, its
    colour in the HTML report (no op is red or green, its exposed / hidden colours, or a compute
    phase's hue); None: a spare colour of the renderer's."""
    p2p: bool = False
    total_size: bool = False
    bus: int = 0
    letter: str = "*"
    color: str | None = None
    html: str | None = None


# c10d's op names, without a backend prefix. ``variant`` keeps the concrete method.
OP_KINDS = {
    "all_reduce": OpKind(bus=2, letter="R", color="green", html="#3949ab"),
    "broadcast": OpKind(letter="B", color="blue", html="#00838f"),
    "reduce": OpKind(letter="r", color="bright_green", html="#7986cb"),
    "all_gather": OpKind(total_size=True, bus=1, letter="G", color="cyan", html="#26c6da"),
    "gather": OpKind(total_size=True, letter="g", color="bright_cyan", html="#80deea"),
    "scatter": OpKind(total_size=True, letter="s", color="bright_magenta", html="#ba68c8"),
    "reduce_scatter": OpKind(total_size=True, bus=1, letter="S", color="magenta", html="#8e24aa"),
    "all_to_all": OpKind(bus=1, letter="A", color="yellow", html="#9e9d24"),
    "barrier": OpKind(letter="|", color="red", html="#424242"),
    "send": OpKind(p2p=True, letter=">", color="bright_yellow", html="#6d4c41"),
    "recv": OpKind(p2p=True, letter="<", color="bright_blue", html="#a1887f"),
}
OTHER_OP = OpKind()   # an op name this table does not know (a newer writer's)
OPS = tuple(OP_KINDS)
P2P_OPS = tuple(o for o, k in OP_KINDS.items() if k.p2p)
TOTAL_SIZE_OPS = tuple(o for o, k in OP_KINDS.items() if k.total_size)
# The ``variant`` of a recv from any source: its peer (``root``) is the sender learned once it completed.
RECV_ANY_SOURCE = "recv_anysource"


def op_kind(op) -> OpKind:
    return OP_KINDS.get(op, OTHER_OP)

# Meta line types.
META_HEADER = "header"        # format, version, commtrace/torch versions, host, pid, ppid, launcher, command,
                              # launch_env (the launcher's variables), clocks; a second one when the rank is known
META_WORLD = "world"          # a default process group was created: world index, world_id, rank, size, backend
META_GROUP = "group"          # id, world, name, desc, backend, size, ranks (global), rank (in group)
META_SIG = "sig"              # id and the static description of an op: see SIG_FIELDS
META_CLOCK = "clock"          # offset_ns to rank 0 (t_rank0 = t_local + offset_ns), rtt_ns, t_mono_ns, when
META_ERROR = "error"          # t_call, group, seq, text: why an op failed
META_SOURCE = "source"        # t_call, group, seq, sig, src: the global rank a recv from any source received from
META_MARK = "mark"            # kind "mark" | "region_begin" | "region_end": t_mono_ns, label;
                              # kind "span" (older traces; now SPAN_RECORDs): phase, module, iteration,
                              # t_begin_ns, t_end_ns
META_LABEL = "label"          # id, text: a string SPAN_RECORDs refer to
META_EXCEPTION = "exception"  # exc_type, message, text (formatted traceback) of the process's uncaught exception
META_END = "end"              # exit_code (null: not observable), how ("exit" | "exception" | "signal" | "hang"),
                              # t_wall_ns, t_mono_ns
META_PROCESS = "process"      # facts about the process learned after it started: spawn_index (its index in
                              # torch.multiprocessing.spawn)
META_DUMP = "dump"            # a hang/signal dump was written: path, reason
META_DDP_MODULE = "ddp_module"    # module (label), class, params, buffers, bucket_cap_bytes, ...
META_DDP_BUCKETS = "ddp_buckets"  # module, from_iteration, buckets: [[param names], ...] (grad-ready order)
META_MESH = "mesh"                # dims: [{dim, name, group}]: a DeviceMesh's dimensions and this rank's group
                                  # (name of a "group" line) in each

# Values of the ``detail`` annotation that name an FSDP / DTensor op's role (capture.module_tracker).
ROLE_DETAILS = ("fsdp_unshard", "fsdp_reduce_grad", "dtensor_redistribute", "dtensor_distribute")


def detail_waits_in_place(detail) -> bool:
    """Whether an op with this ``detail`` is one DDP or Join waits for where it is issued
    (its construction checks, bucket rebuild, buffers, Join's shadow ops). A role
    (``ROLE_DETAILS``) says where an FSDP/TP op comes from, not that anyone waits for it:
    its wait ends at its return, as for any async op."""
    return detail is not None and detail not in ROLE_DETAILS

# Fields of a ``sig`` meta line (besides ``type`` and ``id``); all optional but op.
SIG_FIELDS = (
    "op",          # one of OPS
    "variant",     # concrete c10d method, e.g. "allreduce_coalesced", "_allgather_base"
    "shapes",      # list of input shapes, e.g. [[10, 10]]
    "out_shapes",  # list of output shapes
    "dtype",       # "float32", ... ("mixed" if inputs differ)
    "bytes",       # bytes of the tensors the rank passes in (sparse: indices + values, from the nnz at the call)
    "layout",      # only when a tensor is not strided: "sparse_coo", "sparse_csr", ... ("mixed")
    "out_bytes",   # bytes of the output tensors
    "reduce_op",   # "SUM", ... or null
    "root",        # root / src / dst rank (global), or null
    "tag",         # p2p tag or null
    "async",       # op called with async_op=True (or from C++ with an async contract); before
                   # torch 2.8 read from the torch.distributed call (capture.phases.ASYNC_OP_CALLS)
    "thread",      # thread name
    "python_call", # true: Python code called the group method (dist.all_reduce, ...); absent: C++ did
                   # (DDP's reducer, functional collectives): a DDP bucket is a C++ caller's all_reduce
    "device",      # "cpu", "cuda", ...
    "phase", "detail", "bucket", "params", "module", "callsite", "region",  # annotations
    "api",         # the torch.distributed function that issued the op when it is not the op itself
                   # (object collectives: "all_gather_object", ...; detail "object_sizes"/"object_payload")
)


# What a reader may rely on in a meta line's fields: trace files are untrusted input, so
# ``conform`` drops a field whose JSON value is not of its kind (or out of its range: a world
# of 2^70 ranks would be an allocation of that size), as if it were absent, and the reader
# counts it as damage. null is always allowed: every field is optional. Fields not listed
# are kept as they are (an older or newer writer's).
_I64 = 1 << 63
MAX_RANKS = 1 << 20   # ranks of one world (rank keys: world x 2^20 + rank; rank_ranges.WORLD_STRIDE)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -_I64 <= v < _I64


_KINDS = {
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "int": _is_int,
    "count": lambda v: _is_int(v) and v >= 0,
    "rank": lambda v: _is_int(v) and 0 <= v < MAX_RANKS,
    "size": lambda v: _is_int(v) and 0 < v <= MAX_RANKS,
    "list": lambda v: isinstance(v, list),
    "dict": lambda v: isinstance(v, dict),
    "strs": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "ranks": lambda v: isinstance(v, list) and len(v) <= MAX_RANKS and all(_KINDS["rank"](x) for x in v),
    "shapes": lambda v: isinstance(v, list) and all(isinstance(x, list) and all(_KINDS["count"](d) for d in x)
                                                     for x in v),
}
_TIMES = {"t_mono_ns": "int", "t_wall_ns": "int"}
FIELD_KINDS = {
    META_HEADER: {"format": "str", "version": "int", "source": "str", "record_size": "count",
                  "commtrace_version": "str", "torch_version": "str", "host": "str", "pid": "int", "ppid": "int",
                  "rank": "rank", "launcher": "str", "launch_env": "dict", "run_id": "str", "command": "strs",
                  "argv": "strs", "python": "str", "cwd": "str", "t_wall_open_ns": "int", "t_mono_open_ns": "int",
                  "session": "int", "bounded": "dict", "clock": "str", **_TIMES},
    META_WORLD: {"world": "int", "world_id": "str", "rank": "rank", "world_size": "size", "backend": "str", **_TIMES},
    META_GROUP: {"id": "int", "world": "int", "world_id": "str", "name": "str", "desc": "str", "backend": "str",
                 "size": "size", "ranks": "ranks", "rank": "int", "wrapper": "str"},
    META_SIG: {"id": "int", "op": "str", "variant": "str", "shapes": "shapes", "out_shapes": "shapes", "dtype": "str",
               "bytes": "count", "layout": "str", "out_bytes": "count", "reduce_op": "str", "root": "int",
               "tag": "int", "async": "bool", "thread": "str", "python_call": "bool", "device": "str", "phase": "str",
               "detail": "str", "bucket": "int", "module": "str", "callsite": "str", "region": "str", "api": "str"},
    META_CLOCK: {"offset_ns": "int", "rtt_ns": "int", "ref_rank": "rank", "method": "str", "when": "str",
                 "world_id": "str", **_TIMES},
    META_ERROR: {"t_call": "int", "group": "int", "seq": "int", "sig": "int", "text": "str"},
    META_SOURCE: {"t_call": "int", "group": "int", "seq": "int", "sig": "int", "src": "rank"},
    META_MARK: {"kind": "str", "label": "str", "phase": "str", "module": "str", "iteration": "int",
                "t_begin_ns": "int", "t_end_ns": "int", **_TIMES},
    META_LABEL: {"id": "int", "text": "str"},
    META_EXCEPTION: {"exc_type": "str", "message": "str", "text": "str"},
    META_END: {"exit_code": "int", "how": "str", "reason": "str", **_TIMES},
    META_PROCESS: {"spawn_index": "int", "untraced_backends": "strs"},
    META_DUMP: {"path": "str", "reason": "str", "in_flight": "count", **_TIMES},
    META_DDP_MODULE: {"module": "str", "class": "str", "params": "list", "buffers": "list",
                      "bucket_cap_bytes": "int", "broadcast_buffers": "bool", "find_unused_parameters": "bool"},
    META_DDP_BUCKETS: {"module": "str", "from_iteration": "int", "buckets": "list"},
    META_MESH: {"dims": "list"},
}


def conform(obj: dict) -> int:
    """Drop the fields of meta line ``obj`` that are not of their kind (``FIELD_KINDS``); how many."""
    kinds = FIELD_KINDS.get(obj.get("type"), {})
    wrong = [k for k, v in obj.items() if v is not None and k in kinds and not _KINDS[kinds[k]](v)]
    for k in wrong:
        del obj[k]
    return len(wrong)


# Fields (besides ``type``) of the meta lines that both the Python recorder and
# the C++ writers (patches/commtrace_trace.h) emit; any may be missing or null.
# tests/test_patch.py checks every line the C++ writer emits against these.
META_FIELDS = {
    META_HEADER: ("format", "version", "source", "record_size", "commtrace_version", "torch_version", "host",
                  "pid", "ppid", "rank", "launcher", "launch_env", "run_id", "command", "argv", "python", "cwd",
                  "t_wall_ns", "t_mono_ns", "t_wall_open_ns", "t_mono_open_ns", "session", "bounded",
                  "clock"),  # clock: the C++ writer's clock name ("steady_clock")
    META_WORLD: ("world", "t_mono_ns", "world_id", "rank", "world_size", "backend"),
    META_GROUP: ("id", "world", "world_id", "name", "desc", "backend", "size", "ranks", "rank", "wrapper"),
    META_SIG: ("id", *SIG_FIELDS),
    META_ERROR: ("t_call", "group", "seq", "sig", "text"),
    META_END: ("exit_code", "how", "t_wall_ns", "t_mono_ns", "reason"),
}
