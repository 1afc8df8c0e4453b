"""Why an op happened: phase, iteration, DDP's own step (``detail``) and compute spans.

docs/report.md defines the phases, details, steps and spans. Hooks sit at scope
boundaries (a handful per training step), never per op: the wrapper reads
``Recorder.context_key`` and ``Recorder.iteration``, which they update. A span is
written for the outermost forward, backward or optimizer step per phase and
thread; the report takes the union of a rank's spans, so nesting counts no time twice.
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
import weakref

from .. import torch_compat
from ..trace import schema
from .recorder import Recorder
from .scopes import drop_own_frame, in_context

# DDP rebuilds its buckets once, in the forward after the first backward pass that
# synced gradients (later with no_sync() accumulation, static_graph). Its logging
# data shows the new layout only from a later sampled forward: the first 10
# iterations, then every 100th. Looked for until found, this long at most.
_REBUILD_LOOK_FORWARDS = 2000


class StepCounter:
    """Numbers optimizer steps as docs/report.md defines a step (other optimizers stepping
    before the next forward/backward join it). Spans of the step in progress carry ``done + 1``."""

    def __init__(self):
        self.done = 0
        self._stepped: set[int] = set()  # optimizers that stepped since the last compute span began

    def compute_begins(self) -> int:
        self._stepped.clear()
        return self.done + 1

    def optimizer_begins(self, optimizer) -> int:
        if self._stepped and id(optimizer) not in self._stepped:
            return self.done  # joins the step the previous optimizer ended
        return self.done + 1

    def optimizer_ends(self, optimizer, step: int) -> None:
        if step > self.done:
            self.done = step
            self._stepped = {id(optimizer)}
        else:
            self._stepped.add(id(optimizer))


class PhaseHooks:
    def __init__(self, rec: Recorder):
        self.rec = rec
        self.steps = StepCounter()
        self._depth = threading.local()  # per phase: open compute spans (only the outermost is written)
        self.modules: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # ddp -> state
        self.originals: list[tuple] = []
        self._labels: dict[str, int] = {}
        self._pending_labels: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self.ddp_labels: set[str] = set()   # the labels of the DDP modules seen (capture.module_tracker)
        self.after_backward: list = []      # called when a backward pass ends (capture.module_tracker)

    def install(self) -> None:
        import torch.autograd as autograd
        from torch.nn.parallel import DistributedDataParallel as DDP

        import torch.nn.parallel.distributed as ddp_mod

        # DDP.__init__ itself is not wrapped: a wrapper frame would become the
        # location of every warning the constructor emits. Its collectives happen
        # in these two functions; called from DDP.__init__ they are phase ddp_init.
        self._ddp_init_code = DDP.__init__.__code__
        self._patch(ddp_mod, "_verify_param_shape_across_processes", self._wrap_init_step("param_check"))
        self._patch(ddp_mod, "_sync_module_states", self._wrap_init_step("module_state"))
        self._patch(DDP, "forward", self._wrap_forward)
        # Anything else DDP's _pre_forward sends is the bucket-rebuild broadcast (C++ reducer).
        for owner, name, detail in (
            (DDP, "_pre_forward", "bucket_rebuild"),
            (DDP, "_sync_buffers", "buffers"),
            (DDP, "_check_global_requires_backward_grad_sync", "join_sync_flag"),
            (DDP, "_match_all_reduce_for_bwd_pass", "join_shadow_grad"),
            (DDP, "_match_unused_params_allreduce", "join_shadow_unused"),
            (DDP, "_sync_final_model", "join_final_model"),
        ):
            if hasattr(owner, name):
                self._patch(owner, name, self._wrap_scope(detail=detail))
        self._patch(autograd, "_engine_run_backward", self._wrap_backward)
        # RPC's distributed autograd runs its own engine (DDP inside RPC trainers: its buckets
        # are launched there). torch.distributed imports the module; without RPC it has no backward.
        import torch.distributed.autograd as dist_autograd
        if hasattr(dist_autograd, "backward"):
            self._patch(dist_autograd, "backward", self._wrap_backward)
            # a TorchScript function calling it (torch's JitDistAutogradTest) compiles to its op
            alias = torch_compat.alias_script_builtin(dist_autograd.backward, self.originals[-1][2])
            if alias is not None:
                self.originals.append(("hook", alias))
        from torch.distributed.algorithms.join import Join  # DDP's module imports it (above)
        self._patch(Join, "__exit__", self._wrap_scope("join", detail="join_shadow"))
        notify = self._wrap_scope(detail="join_notify")
        self._patch(Join, "notify_join_context", lambda orig: staticmethod(notify(orig)))
        self._patch(Join, "_get_num_nonjoined_procs", self._wrap_join_round)
        from . import comm_hooks
        comm_hooks.install(self)  # the bucket of each collective a comm hook issues
        self._patch_averagers()
        self._patch(threading.Thread, "_bootstrap_inner", self._wrap_thread)
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        self._opt_tokens = threading.local()   # .stack: the thread's steps begun (threads step apart)
        self.originals.append(("hook", register_optimizer_step_pre_hook(self._opt_pre)))
        self.originals.append(("hook", register_optimizer_step_post_hook(self._opt_post)))
        from .module_tracker import ModuleTracker
        self.module_tracker = ModuleTracker(self)
        self.module_tracker.install()

    def _patch(self, owner, name, make) -> None:
        raw = vars(owner).get(name, getattr(owner, name))  # keeps staticmethod wrappers for uninstall
        setattr(owner, name, make(getattr(owner, name)))
        self.originals.append((owner, name, raw))

    def uninstall(self) -> None:
        for item in reversed(self.originals):
            if item[0] == "hook":
                item[1].remove()
            else:
                setattr(item[0], item[1], item[2])
        self.originals.clear()

    def _wrap_thread(self, orig):
        """Every Python thread's body (run() included, whatever a subclass made of it): see
        AnnotationContext.begin_program_thread. C++ threads (autograd's, a backend's) are not
        Python threads: the ops DDP issues there keep the process-wide context."""
        rec = self.rec

        @functools.wraps(orig)
        def _bootstrap_inner(thread):
            token = rec.begin_program_thread()
            try:
                orig(thread)
            finally:
                rec.end_program_thread(token)
        return _bootstrap_inner

    def _wrap_scope(self, phase: str | None = None, detail: str | None = None):
        rec = self.rec
        fields = {k: v for k, v in (("phase", phase), ("detail", detail)) if v is not None}
        return lambda orig: in_context(rec, orig, lambda args, kwargs: rec.push_context(**fields))

    def begin_compute(self, phase: str, step=None, **fields) -> tuple:
        """Enter ``phase`` (context ``fields``) and its compute span; the token is for end_compute.
        ``step()`` numbers an outermost span (default: a forward or backward's step)."""
        self.rec.claim_context()  # a program thread that trains: the phase is the process's
        depth = getattr(self._depth, phase, 0)
        setattr(self._depth, phase, depth + 1)
        number = (step or self.steps.compute_begins)() if depth == 0 else 0
        return phase, self.rec.push_context(phase=phase, **fields), depth == 0, number, time.monotonic_ns()

    def end_compute(self, token: tuple, label=None, grad: bool = True) -> None:
        """Leave the context; write the span if it was the outermost of its phase."""
        phase, ctx, outer, step, t0 = token
        setattr(self._depth, phase, getattr(self._depth, phase) - 1)
        self.rec.pop_context(ctx)
        if outer:
            self.rec.add_span(phase, t0, time.monotonic_ns(), step, label, grad)

    def _wrap_backward(self, orig):
        """The DDP module of the last forward stays the op's module until its backward pass
        ends, and not after (a later ``dist.all_reduce`` of the user's is not DDP's)."""
        hooks, rec = self, self.rec

        def leave(token):
            module = rec.context_field("module")
            # a submodule's name (capture.module_tracker): the span is not that module's
            hooks.end_compute(token, module if module in hooks.ddp_labels else None)
            if token[2]:  # not a pass inside it (reentrant checkpointing's): its later buckets stay the module's
                rec.set_context(module=None)
                for done in hooks.after_backward:
                    done()
        return in_context(rec, orig, lambda args, kwargs: hooks.begin_compute("backward"), leave)

    def _wrap_join_round(self, orig):
        """Each round of Join's loop answers one step of the ranks still training: a joined
        module's iteration advances with it, so its shadow collectives pair with theirs."""
        hooks, rec = self, self.rec

        def enter(args, kwargs):
            for joinable in getattr(args[0], "_joinables", ()):
                state = hooks.modules.get(joinable)
                if state is not None:
                    state["forwards"] += 1
                    rec.iteration = state["forwards"]
                    rec.set_context(module=state["label"])
            return rec.push_context(detail="join_count")
        return in_context(rec, orig, enter)

    def _step_begins(self, optimizer) -> tuple:
        step = self.steps.optimizer_begins
        return optimizer, self.begin_compute("optimizer", lambda: step(optimizer))

    def _step_ends(self, entered: tuple) -> None:
        optimizer, token = entered
        if token[2]:  # outermost
            self.steps.optimizer_ends(optimizer, token[3])
        self.end_compute(token, type(optimizer).__name__)

    def _opt_pre(self, optimizer, args, kwargs):
        stack = getattr(self._opt_tokens, "stack", None)
        if stack is None:
            stack = self._opt_tokens.stack = []
        stack.append(self._step_begins(optimizer))

    def _opt_post(self, optimizer, args, kwargs):
        # torch runs no post hook after a step that raised: that step's context
        # and span stay open (a program that catches it and goes on is rare).
        stack = getattr(self._opt_tokens, "stack", None)
        if stack:
            self._step_ends(stack.pop())

    def _patch_averagers(self) -> None:
        """Each ``average_parameters`` of model averaging (post-local SGD, also inside
        ``PostLocalSGDOptimizer.step``, which torch's step hooks miss) is an optimizer step
        joining the step it follows (StepCounter): its all_reduces are phase ``optimizer``."""
        try:
            from torch.distributed.algorithms.model_averaging import averagers, hierarchical_model_averager
        except ImportError:
            return
        for cls in (averagers.PeriodicModelAverager, hierarchical_model_averager.HierarchicalModelAverager):
            if "average_parameters" in vars(cls):
                self._patch(cls, "average_parameters", self._wrap_as_optimizer_step)

    def _wrap_as_optimizer_step(self, orig):
        """``orig`` (a method) as an optimizer step of its object, begun and ended by the call itself
        (not torch.optim's step hooks: the step ends also when it raises)."""
        return in_context(self.rec, orig, lambda args, kwargs: self._step_begins(args[0]), self._step_ends)

    def patch_distributed_optimizer(self, optim_mod) -> None:
        """RPC's ``DistributedOptimizer.step(context_id)`` is the trainer's optimizer step: it runs
        the owners' local optimizers over RPC, through TorchScript functional optimizers where
        torch has one (SGD, Adam, ...), which have no step hooks (a torch.optim one on an owner
        is a step of the owner's too, and in the trainer's process joins this one)."""
        cls = getattr(optim_mod, "DistributedOptimizer", None)
        if cls is not None and "step" in vars(cls):
            self._patch(cls, "step", self._wrap_as_optimizer_step)

    def patch_zero_overlap(self, zero_hook) -> None:
        """ZeroRedundancyOptimizer(overlap_with_ddp=True) steps inside DDP's comm hook
        (``hook_with_zero_step``, ``_interleaved``): a functional optimizer (no step hooks) per
        bucket its rank owns, then a broadcast per bucket, then a wait for them all. That is
        one optimizer step, from its first local step or broadcast through the end of the
        wait: its ops are phase ``optimizer`` (no module, no bucket), its span is the step's end."""
        hooks, rec = self, self.rec
        open_steps: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # overlap info -> (t0, step)

        def in_step(orig):
            def enter(args, kwargs):
                info = args[1]._overlap_info
                if info not in open_steps:
                    open_steps[info] = (time.monotonic_ns(), hooks.steps.optimizer_begins(info))
                own = rec.thread_context_fields()  # the comm hook's bucket scope
                fields = rec.context_fields() if own is None else own
                return rec.push_thread_context({**fields, "phase": "optimizer", "module": None, "bucket": None})
            return in_context(rec, orig, enter, rec.pop_thread_context)

        def wait_ends(info):
            t0, step = open_steps.pop(info, (None, 0))
            if t0 is not None:
                hooks.steps.optimizer_ends(info, step)
                rec.add_span("optimizer", t0, time.monotonic_ns(), step, "ZeroRedundancyOptimizer")

        for name in ("_perform_local_step", "_broadcast_bucket"):
            if callable(getattr(zero_hook, name, None)):
                self._patch(zero_hook, name, in_step)
        overlap = getattr(getattr(zero_hook, "ZeroRedundancyOptimizer", None), "__module__", None)
        info_cls = getattr(sys.modules.get(overlap), "_OverlapInfo", None)
        if info_cls is not None and "wait_for_broadcasts" in vars(info_cls):
            self._patch(info_cls, "wait_for_broadcasts",
                        lambda orig: in_context(rec, orig, lambda args, kwargs: args[0], wait_ends))

    def _name_gradient_owners(self) -> None:
        """With several DDP modules, one backward pass may launch buckets of each (from C++,
        naming no module): a post-accumulate-grad hook per parameter (run right before the
        reducer's on the same gradient) makes its module the op's. Installed only once a
        second DDP module exists: one Python call per parameter per backward pass."""
        rec = self.rec
        for ddp, state in list(self.modules.items()):
            if state.get("owner_hooks"):
                continue
            state["owner_hooks"] = True
            label = state["label"]

            def owner(_param, label=label):
                if rec.context_field("module") != label:
                    rec.set_context(module=label)
            for p in ddp.module.parameters():
                if p.requires_grad:
                    self.originals.append(("hook", p.register_post_accumulate_grad_hook(owner)))

    def _wrap_init_step(self, detail: str):
        hooks, rec = self, self.rec

        def enter(args, kwargs):
            fields = {"detail": detail}
            caller = sys._getframe(2)   # the wrapped function's caller (1 is in_context's wrapper)
            if caller.f_code is hooks._ddp_init_code:  # inside DistributedDataParallel.__init__
                local = caller.f_locals
                rec.iteration = 0  # a new module: no training step yet (not the last module's)
                fields.update(phase="ddp_init", module=hooks._label_of(local.get("self"), local.get("module")))
            return rec.push_context(**fields)
        return lambda orig: in_context(rec, orig, enter)

    def _label_of(self, ddp, module) -> str:
        """The module label of a DDP instance, chosen the first time it is seen."""
        label = self._pending_labels.get(ddp) if ddp is not None else None
        if label is None:  # the class name, numbered from the second module of a class on
            cls = type(module if module is not None else getattr(ddp, "module", ddp)).__name__
            n = self._labels[cls] = self._labels.get(cls, 0) + 1
            label = cls if n == 1 else f"{cls}#{n}"
            if ddp is not None:
                self._pending_labels[ddp] = label
        return label

    def _register(self, ddp, module, label: str) -> dict:
        params = [n for n, p in module.named_parameters() if p.requires_grad]
        buffers = [n for n, _ in module.named_buffers()]
        self.ddp_labels.add(label)
        state = {"label": label, "forwards": 0, "params": params, "rebuilt": False, "rebuild_at": None}
        self.modules[ddp] = state
        if len(self.modules) > 1:
            self._name_gradient_owners()
        self.rec.add_meta({"type": schema.META_DDP_MODULE, "module": label, "class": type(module).__name__,
                           "params": params, "buffers": buffers,
                           "bucket_cap_bytes": getattr(ddp, "bucket_bytes_cap", None),
                           "broadcast_buffers": bool(getattr(ddp, "forward_sync_buffers", False)),
                           "find_unused_parameters": bool(getattr(ddp, "find_unused_parameters", False))})
        sizes = _logging_field(ddp, "bucket_sizes")
        if sizes is not None and len([x for x in str(sizes).split(",") if x.strip()]) == 1:
            # One initial bucket holds every parameter (grad-ready order unknown yet).
            self.rec.add_meta({"type": schema.META_DDP_BUCKETS, "module": label, "from_iteration": 1,
                               "buckets": [list(reversed(params))]})
            # If the gradients fit DDP's first bucket, the rebuilt layout is that one bucket too:
            # the layout is known for good (a rank that joins right after the rebuild keeps it).
            import torch.distributed as dist
            first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1 << 20)
            cap = getattr(ddp, "bucket_bytes_cap", first)
            grad_bytes = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
            state["rebuilt"] = grad_bytes <= min(first, cap if isinstance(cap, int) else first)
        return state

    def _wrap_forward(self, orig):
        import torch
        hooks, rec = self, self.rec

        def enter(args, kwargs):
            ddp = args[0]
            state = hooks.modules.get(ddp)
            if state is None:  # first forward of this DDP module: describe it now
                state = hooks._register(ddp, ddp.module, hooks._label_of(ddp, ddp.module))
            state["forwards"] += 1
            rec.iteration = state["forwards"]
            grad = torch.is_grad_enabled()  # an evaluation forward (no_grad) is no micro-step
            before = rec.context_field("module")
            return hooks.begin_compute("forward", module=state["label"]), ddp, state, grad, before

        def leave(entered):
            token, ddp, state, grad, before = entered
            hooks.end_compute(token, state["label"], grad)
            # later ops of this step (backward) are its; an evaluation forward has no backward
            # to end that, so the program's metrics all_reduce after it is not the module's
            rec.set_context(module=state["label"] if grad else before)
            if not state["rebuilt"]:
                hooks._follow_rebuild(ddp, state)
        forward = in_context(rec, orig, enter, leave)
        # torch.compile(ddp_model): Dynamo inlined this wrapper, and its side effects became
        # constants replayed per call (every step iteration 1: DDP's buckets numbered on across
        # steps). Marked as torch.compiler.disable(recursive=False) marks (an attribute Dynamo
        # reads; importing torch._dynamo would change an untraced program): the wrapper runs
        # eagerly, DDP.forward and the module under it as without commtrace (scopes.in_context).
        forward._torchdynamo_disable = True
        forward._torchdynamo_disable_recursive = False
        return forward

    def _follow_rebuild(self, ddp, state) -> None:
        """Note the forward in which ``_has_rebuilt_buckets`` turned True, then read the new
        layout once DDP's logging data has it."""
        n = state["forwards"]
        if state["rebuild_at"] is None:
            if not getattr(ddp, "_has_rebuilt_buckets", False):
                return
            state["rebuild_at"] = n
            # Until the new layout is seen, bucket k of this forward on is no longer the first layout's.
            self.rec.add_meta({"type": schema.META_DDP_BUCKETS, "module": state["label"], "from_iteration": n,
                               "buckets": []})
        since = n - state["rebuild_at"]
        if since > _REBUILD_LOOK_FORWARDS:
            state["rebuilt"] = True  # never shown: params stay unknown from the rebuild on
        elif since <= 12 or n % 100 <= 2:
            self._check_rebuild(ddp, state)

    def _check_rebuild(self, ddp, state) -> None:
        indices = _logging_field(ddp, "rebuilt_per_bucket_param_indices")
        if not indices:
            return
        state["rebuilt"] = True
        params = state["params"]
        buckets = [[params[int(i)] for i in chunk.split() if i.isdigit() and int(i) < len(params)]
                   for chunk in str(indices).split(",")]
        self.rec.add_meta({"type": schema.META_DDP_BUCKETS, "module": state["label"],
                           "from_iteration": state["rebuild_at"], "buckets": buckets})


def _logging_field(ddp, name):
    try:
        return ddp._get_ddp_logging_data().get(name)
    except Exception:
        return None


# Object collectives move sizes (int64) then a pickled payload (uint8) with ordinary
# collectives. While one runs, the context carries ``api`` (its name), and the sig of each
# op gets ``detail`` "object_sizes" or "object_payload" by dtype (wrapper): nothing per op.
OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
                      "send_object_list", "recv_object_list")
# The fields the ops of these c10d functions carry: an object collective names itself
# (api); send and recv wait for their op before returning, unlike isend, irecv and
# batch_isend_irecv, which hand its Work to the caller (the ProcessGroup sees the same call).
LABELLED_CALLS = {**{name: ("api", name) for name in OBJECT_COLLECTIVES},
                  "send": ("async", False), "recv": ("async", False)}
BLOCKING_P2P = ("send", "recv")
# The c10d functions with an ``async_op`` argument (torch 2.4's; default False: the caller
# waits) and their Options type. Where torch does not hand async_op to the group
# (torch_compat.c10d_passes_async_op: before 2.8) their ops' ``async`` is the call's
# own async_op; the innermost call's wins (all_gather_object's all_gather, an
# async_op=True call inside a blocking one). The underscored ones delegate to another.
# There, too, ``_coalescing_manager``'s fused op (issued as its block ends) is labelled
# with its async_ops.
ASYNC_OP_CALLS = {
    "broadcast": "BroadcastOptions", "all_reduce": "AllreduceOptions",
    "all_reduce_coalesced": "AllreduceCoalescedOptions", "reduce": "ReduceOptions",
    "all_gather": "AllgatherOptions", "all_gather_into_tensor": "AllgatherOptions",
    "_all_gather_base": "AllgatherOptions", "all_gather_coalesced": "AllgatherOptions",
    "gather": "GatherOptions", "scatter": "ScatterOptions", "reduce_scatter": "ReduceScatterOptions",
    "reduce_scatter_tensor": "ReduceScatterOptions", "_reduce_scatter_base": "ReduceScatterOptions",
    "all_to_all": "AllToAllOptions", "all_to_all_single": "AllToAllOptions", "barrier": "BarrierOptions",
}


class _ExitLabelled:
    """A context manager whose exit runs with ``async`` labelled: ``_coalescing_manager``
    issues its fused op when its block ends, after the calls inside have returned."""

    def __init__(self, rec, manager, value: bool):
        self.rec, self.manager, self.value = rec, manager, value

    def __enter__(self):
        return self.manager.__enter__()

    def __exit__(self, *exc):
        token = self.rec.push_context_field("async", self.value)
        try:
            return self.manager.__exit__(*exc)
        except BaseException as e:
            drop_own_frame(e)
            raise
        finally:
            self.rec.pop_context(token)


def _coalescing_label(rec, fn):
    """``_coalescing_manager(group, device, async_ops)`` wrapped: its fused op's ``async`` is async_ops."""
    at = list(inspect.signature(fn).parameters).index("async_ops")

    @functools.wraps(fn)
    def labelled(*args, **kwargs):
        value = bool(args[at] if len(args) > at else kwargs.get("async_ops", False))
        return _ExitLabelled(rec, fn(*args, **kwargs), value)
    return labelled


def _fixed_label(rec, fn, field, value):
    # push_context_field: its cache makes the (per-call) push ~0.5 us, against ~1.5 us for push_context
    return in_context(rec, fn, lambda args, kwargs: rec.push_context_field(field, value))


def _blocking_p2p_label(rec, fn, field, value):
    """``fn`` (send or recv) labelled; when it returns, torch has waited for its op: the end of
    an op no future or ``is_completed()`` times (a Python backend's Work that only implements
    ``wait()``) is known then, and stamped (else it stayed in flight for good)."""
    @functools.wraps(fn)
    def blocking(*args, **kwargs):
        token = rec.push_context_field(field, value)
        t_call = time.monotonic_ns()
        try:
            out = fn(*args, **kwargs)
        except BaseException as e:
            drop_own_frame(e)
            raise
        finally:
            rec.pop_context(token)
        rec.blocking_p2p_returned(t_call)
        return out
    return blocking


def _async_op_label(rec, fn):
    """``fn`` wrapped: the call's own async_op (positional or keyword) as its ops' ``async``;
    None where ``fn`` takes no async_op."""
    params = list(inspect.signature(fn).parameters)
    if "async_op" not in params:
        return None
    at = params.index("async_op")
    return in_context(rec, fn, lambda args, kwargs: rec.push_context_field(
        "async", bool(args[at] if len(args) > at else kwargs.get("async_op", False))))


def label_c10d_calls(rec) -> list[str]:
    """Wrap the c10d functions of LABELLED_CALLS that torch has, and those of ASYNC_OP_CALLS
    where torch does not pass async_op on (in c10d and torch.distributed); the names wrapped."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    # name -> label(rec, fn): fn wrapped so that its ops carry the label (None: not labelled)
    labels = {name: functools.partial(_blocking_p2p_label if name in BLOCKING_P2P else _fixed_label,
                                      field=field, value=value)
              for name, (field, value) in LABELLED_CALLS.items()}
    if not torch_compat.c10d_passes_async_op(set(ASYNC_OP_CALLS.values())):
        labels.update(dict.fromkeys(ASYNC_OP_CALLS, _async_op_label), _coalescing_manager=_coalescing_label)
    done = []
    for name, label in labels.items():
        fn = getattr(c10d, name, None)
        if fn is None or getattr(fn, "_commtrace_labelled", None):
            continue
        wrapped = label(rec, fn)
        if wrapped is None:
            continue
        wrapped._commtrace_labelled = name
        setattr(c10d, name, wrapped)  # torch's own callers look it up here
        if getattr(dist, name, None) is fn:
            setattr(dist, name, wrapped)
        done.append(name)
    return done
