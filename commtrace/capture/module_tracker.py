"""Where FSDP, FSDP2 and tensor parallelism communicate: module, phase, role, mesh dimension
(docs/report.md defines the fields).

``module``: in forward, torch's global module forward pre/post hooks keep a per-thread
stack; in backward, when a module's forward ends, a pre-hook on the autograd node that made
its first output (one C++ call; a tensor or multi-grad hook costs ~10x more) marks its
backward's start, one on the node that made its first input its end. ``detail`` and set-up
``phase``: the torch functions that move FSDP units' and DTensors' data are wrapped
(``install``). The context changes at module boundaries only: the op wrappers' hot path is
unchanged. The module hooks cost every module call a few microseconds, so they are installed
only once the process builds a DeviceMesh or an FSDP module: a DDP-only or plain program
keeps its speed (and DDP's ops keep the DDP module label: its buckets are numbered per label).
"""
from __future__ import annotations

import functools
import sys
import threading
import weakref

from .. import torch_compat
from ..trace import schema
from . import pipeline
from .scopes import AfterImport, drop_own_frame, in_context


class ModuleTracker:
    def __init__(self, hooks):
        self.hooks = hooks            # capture.phases.PhaseHooks: context, spans, _patch
        self.rec = hooks.rec
        self.names: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # module -> name
        self._roots: "weakref.WeakSet" = weakref.WeakSet()  # the modules named as roots
        # .stack: [(name, token or None)] of the running forwards; .entering: see _enter_at
        self._tls = threading.local()
        self._bw: list[str] = []       # modules whose backward began and has not ended
        self._on = False
        self._meshes: set = set()
        self._ended: "weakref.WeakSet" = weakref.WeakSet()  # modules that carry _forward_end
        self._getstate_patched = False
        self.evaluating = 0           # pipeline schedules' eval() running: their forwards begin no step

    def install(self) -> None:
        """Patch each torch module right after the program imports it: importing DTensor or
        FSDP here would change what the program sees (they register c10d's "fake" backend)."""
        # redistribute_local_tensor does every DTensor placement change; later ``from ... import``s
        # of it (DTensor's dispatcher, _api) get the patched one.
        dtensor = (("redistribute_local_tensor", self._scope("dtensor_redistribute")),)
        # Set-up, as DDP's construction is phase ddp_init: parallelize_module's ops (the scatter /
        # broadcast of each parameter from its mesh's first rank) are phase tp_init; distribute_tensor's
        # have the role dtensor_distribute, and outside any phase the phase dtensor_init.
        distribute = (("distribute_tensor", self._scope("dtensor_distribute", phase="dtensor_init")),)
        # Each module of the plan is parallelized by a call of its own (the innermost names it).
        unit = lambda args, kw: args[0] if args else kw.get("module")  # noqa: E731  (its module argument)
        parallelize = (("parallelize_module", self._scope(phase="tp_init", unit=unit, unit_wins=True)),)
        # Distributed checkpointing's collectives (its planners' gather/scatter of metadata, the
        # state-dict helpers' gathers) are phase checkpoint wherever no phase runs.
        checkpoint = self._scope(phase="checkpoint")
        after = {
            "torch.distributed.checkpoint.state_dict_saver": lambda m: self._patch_each(
                m, [(name, checkpoint) for name in ("save", "async_save", "save_state_dict")]),
            "torch.distributed.checkpoint.state_dict_loader": lambda m: self._patch_each(
                m, [(name, checkpoint) for name in ("load", "load_state_dict")]),
            "torch.distributed.checkpoint.state_dict": lambda m: self._patch_each(
                m, [(f"{verb}_{what}", checkpoint) for verb in ("get", "set")
                    for what in ("state_dict", "model_state_dict", "optimizer_state_dict")]),
            "torch.distributed.device_mesh": self._patch_mesh,
            "torch.distributed.fsdp._fully_shard._fsdp_param_group": self._patch_fsdp2,
            "torch.distributed._composable.fsdp._fsdp_param_group": self._patch_fsdp2,   # older releases
            "torch.distributed.fsdp._fully_shard._fsdp_state": self._patch_fsdp2_state,
            "torch.distributed._composable.fsdp._fsdp_state": self._patch_fsdp2_state,   # older releases
            "torch.distributed.fsdp._runtime_utils": self._patch_fsdp1_runtime,
            # called by FSDP.__init__
            "torch.distributed.fsdp._init_utils": lambda m: self._patch_each(
                m, (("_init_process_group_state", self._enabling),)),
            "torch.distributed.tensor._redistribute": lambda m: self._patch_each(m, dtensor),
            "torch.distributed._tensor.redistribute": lambda m: self._patch_each(m, dtensor),  # older torch
            # patched as soon as loaded: torch's own modules bind these names when they import them
            "torch.distributed.tensor._api": lambda m: self._patch_each(m, distribute),
            "torch.distributed._tensor.api": lambda m: self._patch_each(m, distribute),  # older torch
            "torch.distributed.tensor.parallel.api": lambda m: self._patch_each(m, parallelize),
            # a pipeline stage runs plain modules: their forwards are its compute
            "torch.distributed.pipelining.stage": self._patch_pipeline_stage,
            "torch.distributed.pipelining.schedules": lambda m: pipeline.patch_schedules(self, m),
            "torch.nn.utils": self._patch_clipping,
            # ZeroRedundancyOptimizer(overlap_with_ddp=True) steps inside the comm hook
            "torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook": self.hooks.patch_zero_overlap,
            # RPC's DistributedOptimizer steps the owners' optimizers over RPC
            "torch.distributed.optim.optimizer": self.hooks.patch_distributed_optimizer,
            "torch.distributed.fsdp.fully_sharded_data_parallel": lambda m: self._patch_each(
                getattr(m, "FullyShardedDataParallel", None), (("clip_grad_norm_", self._scope(phase="optimizer")),)),
        }
        finder = AfterImport(after, "module annotations of {name}")
        for name in list(after):
            mod = sys.modules.get(name)
            if mod is not None:
                after.pop(name)(mod)
        if after:
            sys.meta_path.insert(0, finder)
            self.hooks.originals.append(("hook", finder))
        self.hooks.after_backward.append(self._bw.clear)  # _bw is cleared in place, never rebound

    def enable(self) -> None:
        if self._on or not self.hooks.originals:  # not on twice; not after PhaseHooks.uninstall
            return
        self._on = True
        import torch
        from torch.nn.modules import module as nn_module
        global _compiling
        _compiling = torch.compiler.is_compiling
        self._grad_enabled = torch.is_grad_enabled
        self._Tensor = torch.Tensor
        self._Module = torch.nn.Module
        from torch.nn.parallel import DistributedDataParallel
        self._DDP = DistributedDataParallel
        # always_call: the stack stays right when a forward raises
        post = nn_module.register_module_forward_hook(self._global_post, always_call=True)
        self._handles = [nn_module.register_module_forward_pre_hook(self._pre), post]
        self.hooks.originals.extend(("hook", h) for h in self._handles)
        _TRACKER[:] = [self]

    def disable(self) -> None:
        """Remove the module hooks (benchmarks/bench_modules.py compares on and off)."""
        if not self._on:
            return
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._ended = weakref.WeakSet()
        self._tls = threading.local()
        self._bw.clear()
        _TRACKER.clear()
        self._on = False

    def name_of(self, module, find_root: bool = False) -> str:
        """``module``'s name from its root: the root is named (by ``_class_name``) with every
        submodule the first time one of them is asked for. ``find_root`` (a set-up call, e.g.
        parallelize_module on each block, before any forward): the root is looked for in the
        callers' local variables, else ``module`` is one until a module containing it is named."""
        name = self.names.get(module)
        if name is None:
            root = _enclosing_module(module) if find_root else None
            self._name_tree(root if root is not None else module)
            name = self.names[module]
        return name

    def _name_tree(self, root, name: str | None = None) -> None:
        """Name ``root`` (``name``, else its class) and its submodules; a submodule named as a root
        before (its subtree too) is renamed from this root: its names were missing this root's part."""
        below = [m for m in root.modules() if m in self._roots and m is not root]
        renamed = {id(m) for r in below for m in r.modules()}
        for r in below:
            self._roots.discard(r)
        name = name or _class_name(root)
        self.names[root] = name
        self._roots.add(root)
        for sub_name, sub in root.named_modules():
            if sub_name and (sub not in self.names or id(sub) in renamed):
                self.names[sub] = _user_name(sub_name) or name

    def _stack(self) -> list:
        s = getattr(self._tls, "stack", None)
        if s is None:
            s = self._tls.stack = []
        return s

    def _ddp_scope(self) -> bool:
        """Inside a DDP module's step: its ops keep the DDP label (its buckets are counted per label)."""
        return self.rec.context_field("module") in self.hooks.ddp_labels

    def _pre(self, module, args):
        if _compiling():  # Dynamo traces module hooks: inside torch.compile the tracker is a no-op
            return None
        stack = self._stack()
        self._tls.entering = None
        hooks = module._forward_hooks
        if hooks:
            if module not in self._ended:
                self._add_end_hook(module)
            elif len(hooks) == 1 and next(iter(hooks.values())) is _forward_end:
                self._drop_end_hook(module)  # its own hooks are gone: ours goes too
        # A DDP module (its forward, wrapped, labels its step; before it runs, a second
        # forward's scope is not yet its) and the modules it runs keep the DDP label.
        if self._ddp_scope() or isinstance(module, self._DDP):
            stack.append(None)
            return None
        name = self.name_of(module)
        rec = self.rec
        token = None
        if not stack and rec.context_field("phase") is None:  # the outermost forward, with its span
            token = (self.hooks.begin_compute("forward", module=name), self._grad_enabled() and not self.evaluating)
        else:
            rec.set_context_field("module", name)
        stack.append((name, token))
        if self._grad_enabled():
            node = _first_node(args, self._Tensor)
            if node is not None:
                node.register_prehook(functools.partial(self._bw_leave, name))
        return None

    def _add_end_hook(self, module) -> None:
        """Torch runs global forward hooks before a module's own: a module with hooks of its
        own (TP's output layouts, FSDP's) is ended by ``_forward_end`` after them, so their ops
        are still its. Other modules keep no trace of commtrace (torch.save, deepcopy), nor do
        these once their own hooks are removed (``_drop_end_hook`` at their next forward)."""
        self._ended.add(module)
        if any(h is _forward_end for h in module._forward_hooks.values()):
            return  # a deep copy of a module that had it already
        if not self._getstate_patched:
            self._getstate_patched = True
            self.hooks._patch(self._Module, "__getstate__", _without_end_hook)
        handle = module.register_forward_hook(_forward_end, always_call=True)
        self.hooks.originals.append(("hook", handle))
        self._handles.append(handle)

    def _drop_end_hook(self, module) -> None:
        """Remove ``_forward_end`` from a module whose own forward hooks were removed (e.g.
        CommDebugMode's, when it exits): its hooks are as the program left them."""
        self._ended.discard(module)
        for key in [k for k, h in module._forward_hooks.items() if h is _forward_end]:
            del module._forward_hooks[key]
            module._forward_hooks_always_called.pop(key, None)

    def _global_post(self, module, args, output):
        if _compiling() or (module._forward_hooks and module in self._ended):  # ended by its _forward_end
            return None
        return self._post(module, args, output)

    def _post(self, module, args, output):
        stack = self._stack()
        if not stack:
            return None
        entry = stack.pop()
        if entry is None:
            return None
        name, token = entry
        rec = self.rec
        if token is not None:
            self.hooks.end_compute(token[0], name, token[1])
        elif stack and stack[-1] is not None:
            rec.set_context_field("module", stack[-1][0])
        else:  # a forward recomputed in backward (activation checkpointing) ends
            rec.set_context_field("module", self._bw[-1] if self._bw else None)
        if self._grad_enabled():
            node = _first_node(output, self._Tensor)
            # A module that returns its input as is (nn.Identity, Dropout(p=0) or in eval
            # mode) made no node: its "output node" is its input's, whose pre-hooks would
            # run its end before its begin and leave it in _bw for the rest of the pass.
            if node is not None and node is not _first_node(args, self._Tensor):
                self._enter_at(node, name)
        if token is not None:  # the forward is over: hold no node past it
            self._tls.entering = None
        return None

    def _enter_at(self, node, name) -> None:
        """Begin ``name``'s backward when ``node`` gets its gradient. A module that returns its last
        submodule's output (a Sequential, a wrapper) shares that node; forwards end inner first and
        pre-hooks run in the order they were added, so the outer one would land above the inner one.
        One hook per node enters them all, outermost first. The node is held only until the next
        forward begins or ends (a freed node's id may be reused)."""
        entering = getattr(self._tls, "entering", None)
        if entering is not None and entering[0] is node:
            entering[1].insert(0, name)
            return
        names = [name]
        node.register_prehook(functools.partial(self._bw_enter, names))
        self._tls.entering = (node, names)

    def _bw_enter(self, names, *_):
        if self._ddp_scope():
            return
        self._bw.extend(names)
        self.rec.set_context_field("module", names[-1])

    def _bw_leave(self, name, *_):
        bw = self._bw
        for i in range(len(bw) - 1, -1, -1):
            if bw[i] == name:
                del bw[i]
                if not self._ddp_scope():
                    self.rec.set_context_field("module", bw[-1] if bw else None)
                return

    def _scope(self, detail: str | None = None, phase: str | None = None, unit=None, unit_wins: bool = False):
        """A wrapper for a torch function: its ops get ``detail``; ``phase`` where none is set
        (a forward's stays); the module ``unit(args, kwargs)`` where no module runs (with ``unit_wins``:
        whatever module runs). Once per call: nothing per op."""
        rec, tracker = self.rec, self

        def enter(args, kwargs):
            fields = {} if detail is None else {"detail": detail}
            if phase is not None and rec.context_field("phase") is None:
                fields["phase"] = phase
            if unit is not None and (unit_wins or rec.context_field("module") is None):
                mod = unit(args, kwargs)
                if mod is not None:
                    fields["module"] = tracker.name_of(mod, find_root=True)
            if len(fields) == 1:  # push_context_field's cache: ~0.5 us against push_context's ~1.5
                (field, value), = fields.items()
                return rec.push_context_field(field, value)
            return rec.push_context(**fields)

        def wrap(orig):
            if getattr(orig, "_commtrace_scope", False):    # a module re-exporting one wrapped already
                return orig
            scoped = in_context(rec, orig, enter)
            scoped._commtrace_scope = True
            return scoped
        return wrap

    def _enabling(self, orig):
        tracker = self

        @functools.wraps(orig)
        def enabling(*args, **kwargs):
            tracker.enable()
            return orig(*args, **kwargs)
        return enabling

    def _naming_stage(self, orig):
        """A pipeline stage's __init__: tracking on, and its module named ``Class[stageI]`` by
        its stage index (two stages of one class on a rank, or across ranks, are told apart)."""
        tracker = self

        @functools.wraps(orig)
        def init(stage, *args, **kwargs):
            tracker.enable()
            orig(stage, *args, **kwargs)
            index, submod = getattr(stage, "stage_index", None), getattr(stage, "submod", None)
            if type(index) is int and isinstance(submod, tracker._Module):
                tracker._name_tree(submod, f"{_class_name(submod)}[stage{index}]")
        return init

    def _patch_each(self, owner, patches) -> None:
        """Patch each (name, make) that ``owner`` has (a module's callable, or a class's own)."""
        for name, make in patches if owner is not None else ():
            if name in vars(owner) if isinstance(owner, type) else callable(getattr(owner, name, None)):
                self.hooks._patch(owner, name, make)

    def _patch_fsdp2(self, pg_mod) -> None:
        def unit(args, _kwargs):
            mods = getattr(args[0], "modules", None) if args else None
            return mods[0] if mods else None
        # lazy_init: FSDP2 without a mesh given still builds one; this is the backstop.
        # post_backward names its unit whatever module looks running: the root's (and a unit's
        # whose input gets no gradient) runs in FSDP2's end-of-backward callback, where the
        # last submodule whose backward began (layers.0.up) never saw its backward end.
        self._patch_each(getattr(pg_mod, "FSDPParamGroup", None), (
            ("unshard", self._scope("fsdp_unshard", unit=unit)),
            ("post_backward", self._scope("fsdp_reduce_grad", unit=unit, unit_wins=True)),
            ("lazy_init", self._enabling)))

    def _patch_fsdp2_state(self, state_mod) -> None:
        """A unit's pre-backward (its unshard, its prefetches) runs in a hook on its output's
        gradient, before the node pre-hook that begins its backward: its ops are the unit's."""
        def unit(args, _kwargs):
            return torch_compat.fsdp2_state_module(args[0]) if args else None
        self._patch_each(getattr(state_mod, "FSDPState", None), (("_pre_backward", self._scope(unit=unit, unit_wins=True)),))

    def _patch_fsdp1_runtime(self, rt) -> None:
        def unit(args, _kwargs):  # (state, handle, ...): the handle's module (a prefetch: not the state's)
            if not args:
                return None
            mod = getattr(args[1], "_fully_sharded_module", None) if len(args) > 1 else None
            return mod if mod is not None else args[0]
        # named after its unit whatever module looks running: autograd runs a flat parameter's
        # post-backward hook when its gradient is done, often inside a later unit's backward
        # (the root's head reduced inside layers.0.fc's); a module's own is inside its unit anyway
        reduce_grad = self._scope("fsdp_reduce_grad", unit=unit, unit_wins=True)
        def hook_unit(args, _kwargs):  # (state, module, handle, grad): a unit's pre-backward hook
            if len(args) < 3 or getattr(args[0], "_is_root", True):
                return None    # the root's: its prefetch stays the prefetched unit's (_unshard's rule)
            mod = getattr(args[2], "_fully_sharded_module", None)
            return mod if mod is not None else args[1]
        # It runs as its output's gradient arrives, before the tracker ends the backward of the
        # module that computed it: its prefetch is the unit's, not that module's (as FSDP2's)
        self._patch_each(rt, (("_unshard", self._scope("fsdp_unshard", unit=unit)), ("_reduce_grad", reduce_grad),
                              ("_reduce_grad_no_shard", reduce_grad),
                              ("_pre_backward_hook", self._scope(unit=hook_unit, unit_wins=True))))

    def _patch_pipeline_stage(self, stage_mod) -> None:
        self._patch_each(getattr(stage_mod, "_PipelineStageBase", None), (("__init__", self._naming_stage),))
        pipeline.patch_stage(self, stage_mod)

    def _patch_clipping(self, utils) -> None:
        """In torch.nn.utils and its clip_grad module (whose functions call each other there)."""
        names = ("clip_grad_norm_", "get_total_norm", "clip_grads_with_norm_")
        optimizer = self._scope(phase="optimizer")
        for owner in (utils, getattr(utils, "clip_grad", None)):
            self._patch_each(owner, [(name, optimizer) for name in names])

    def _patch_mesh(self, dm) -> None:
        cls = getattr(dm, "DeviceMesh", None)
        if cls is None or "__init__" not in vars(cls):
            return
        tracker = self

        def make(orig):
            @functools.wraps(orig)
            def __init__(mesh, /, *args, **kwargs):  # positional-only: callers pass mesh=... (the tensor)
                try:
                    orig(mesh, *args, **kwargs)
                except BaseException as e:
                    drop_own_frame(e)
                    raise
                tracker.enable()
                tracker._note_mesh(mesh)
            return __init__
        self.hooks._patch(cls, "__init__", make)

    def _note_mesh(self, mesh) -> None:
        """A ``mesh`` meta line: the dimension names and this rank's group of each."""
        names = getattr(mesh, "mesh_dim_names", None)
        dims = []
        for i in range(getattr(mesh, "ndim", 0)):
            try:
                gname = str(mesh.get_group(i).group_name)
            except Exception:  # this rank is not in the mesh, or no group yet
                continue
            dims.append({"dim": i, "name": str(names[i]) if names and i < len(names) else str(i), "group": gname})
        key = tuple((d["name"], d["group"]) for d in dims)
        if not dims or key in self._meshes:
            return
        self._meshes.add(key)
        self.rec.add_meta({"type": schema.META_MESH, "dims": dims})


_TRACKER: list = []  # the enabled ModuleTracker (one per process)


def _compiling() -> bool:   # replaced by torch.compiler.is_compiling once the tracker is on
    return False


# Attributes under which wrappers hold the module they wrap (FSDP1, activation checkpointing,
# torch.compile): left out of module names, as torch leaves them out of parameter names.
_WRAPPER_ATTRS = frozenset(("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"))


def _class_name(module) -> str:
    """The class the program wrote, behind wrappers: FSDP1, checkpoint_wrapper and torch.compile
    hold it under an attribute; fully_shard, replicate and composable DDP change its class to one
    they make (``FSDPNet``: their class first, the program's second). DDP's label is that class too."""
    for _ in range(8):  # FSDP(checkpoint_wrapper(compiled)): a few layers at most
        inner = next((module._modules.get(a) for a in _WRAPPER_ATTRS if module._modules.get(a) is not None), None)
        if inner is None:
            break
        module = inner
    cls = type(module)
    while ("__deepcopy__" in vars(cls) and len(cls.__bases__) == 2 and cls.__name__.endswith(cls.__bases__[1].__name__)
           and cls.__bases__[0].__module__.startswith("torch.distributed.")):
        cls = cls.__bases__[1]
    return cls.__name__


def _enclosing_module(module, depth: int = 24):
    """The largest module in the callers' local variables that contains ``module`` (torchtitan
    parallelizes ``model.layers``' blocks one by one in a function that holds ``model``), or None.
    Runs once per model: its naming names every submodule."""
    from torch.nn import Module  # loaded: the program built ``module``
    best, size, seen = None, 0, set()
    frame = sys._getframe(2)
    while frame is not None and depth:
        for value in frame.f_locals.values():
            # not a DDP wrapper (never a root here: its submodules' names would begin with "module.")
            if (isinstance(value, Module) and value is not module and id(value) not in seen
                    and type(value).__name__ != "DistributedDataParallel"):
                seen.add(id(value))
                mods = list(value.modules())
                if len(mods) > size and any(m is module for m in mods):
                    best, size = value, len(mods)
        frame, depth = frame.f_back, depth - 1
    return best


def _user_name(name: str) -> str:
    """A module's qualified name without wrapper attributes ("" for the root's wrapped module)."""
    if not any(w in name for w in _WRAPPER_ATTRS):
        return name
    return ".".join(p for p in name.split(".") if p not in _WRAPPER_ATTRS)


def _without_end_hook(getstate):
    """nn.Module.__getstate__ that leaves ``_forward_end`` out: torch.save / deepcopy of a module
    the tracker ended keep no trace of commtrace (it loads where commtrace cannot be imported)."""
    @functools.wraps(getstate)
    def state_of(module):
        state = getstate(module)
        hooks = state.get("_forward_hooks") if isinstance(state, dict) else None
        ours = [k for k, h in hooks.items() if h is _forward_end] if hooks else ()
        if ours:
            for key in ("_forward_hooks", "_forward_hooks_always_called", "_forward_hooks_with_kwargs"):
                if key in state:
                    state[key] = type(state[key])((k, v) for k, v in state[key].items() if k not in ours)
        return state
    return state_of


def _forward_end(module, args, output):
    if _compiling():
        return
    if _TRACKER:
        _TRACKER[0]._post(module, args, output)


def _first_node(value, tensor_type):
    """The autograd node (taking pre-hooks) of the first tensor with one in a module's inputs
    or output (one level of tuple/list/dict); None for a leaf or no grad."""
    if isinstance(value, tensor_type):
        items = (value,)
    elif isinstance(value, (tuple, list)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return None
    for t in items:
        if isinstance(t, tensor_type):
            node = t.grad_fn
            if node is not None and hasattr(node, "register_prehook"):
                return node
    return None
