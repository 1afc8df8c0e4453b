"""Pipeline schedules (``torch.distributed.pipelining``): the step a schedule's ``step()`` bounds,
and the phase and module of the activations and gradients its stages send and receive
(docs/report.md, "Step").

Each outermost ``step()`` call is a ``schedule`` span: not compute (its time holds the bubbles),
it begins the step, so the receive a later stage posts before its first forward is the step's.
A stage's ``get_{fwd,bwd}_{recv,send}_ops`` build the P2POps a schedule issues, in batches that
may mix a stage's forward sends with its backward receives (1F1B's steady state): each such
P2POp becomes a ``LabelledP2POp``, whose ``tensor``, read by the batch right before it issues
that op, sets the context's phase and module; the batch functions' wrappers restore the context
when they return. Costs are per step, per op list and per batch, plus a field set per schedule
op: the op wrappers' hot path is unchanged.
"""
from __future__ import annotations

import functools
import threading
import time

from .scopes import drop_own_frame, in_context, keep_wrapper_eager

# the stage's methods that build a schedule's P2POps -> the phase of what they move
_OP_BUILDERS = {"get_fwd_recv_ops": "forward", "get_fwd_send_ops": "forward",
                "get_bwd_recv_ops": "backward", "get_bwd_send_ops": "backward"}


def patch_stage(tracker, stage_mod) -> None:
    cls = getattr(stage_mod, "_PipelineStageBase", None)
    if cls is None:
        return
    import torch.distributed as dist
    if not dist.P2POp.__dictoffset__:   # a slotted P2POp (not 2.13's) could not change class: unlabelled
        return
    labelled = _labelled_class(tracker.rec, dist.P2POp)
    for name, phase in _OP_BUILDERS.items():
        if name in vars(cls):
            tracker.hooks._patch(cls, name, functools.partial(_labelling, tracker, labelled, phase))
    # batches of them: a schedule's own helper (torch >= 2.13 issues a homogeneous batch op by op)
    # and c10d's, which older schedules call directly
    import torch.distributed.distributed_c10d as c10d
    batch = c10d.batch_isend_irecv
    if not getattr(batch, "_commtrace_scope", False):
        restoring = _restoring(tracker.rec)(batch)
        tracker.hooks._patch(c10d, "batch_isend_irecv", lambda orig: restoring)
        if getattr(dist, "batch_isend_irecv", None) is batch:
            tracker.hooks._patch(dist, "batch_isend_irecv", lambda orig: restoring)


def patch_schedules(tracker, schedules_mod) -> None:
    """``step`` of every schedule class that defines one (the base classes), and the helper
    the schedules issue their batches with."""
    base = getattr(schedules_mod, "_PipelineSchedule", None)
    if base is None:
        return
    depth = threading.local()
    for cls in [c for c in vars(schedules_mod).values() if isinstance(c, type) and issubclass(c, base)]:
        step = vars(cls).get("step")
        if step is not None and not getattr(step, "__isabstractmethod__", False):
            tracker.hooks._patch(cls, "step", functools.partial(_bounding, tracker, depth))
    if callable(vars(schedules_mod).get("_batch_p2p")):
        tracker.hooks._patch(schedules_mod, "_batch_p2p", _restoring(tracker.rec))


def _bounding(tracker, depth, orig):
    """``step`` wrapped: a ``schedule`` span numbered as the step's compute (StepCounter), from its
    call to its return. A step without backward (``eval()``, under no_grad) begins no step, nor do
    its stages' forwards (autograd stays enabled in ``eval()``: they looked like training ones)."""
    hooks, rec = tracker.hooks, tracker.rec
    import torch

    @functools.wraps(orig)
    def step(schedule, *args, **kwargs):
        if getattr(depth, "inside", False):   # a subclass's step calling its base's
            return orig(schedule, *args, **kwargs)
        rec.claim_context()
        number = hooks.steps.compute_begins()
        grad = bool(getattr(schedule, "_has_backward", True)) and torch.is_grad_enabled()
        token = rec.push_context()   # restored on return, whatever a batch left
        depth.inside = True
        tracker.evaluating += not grad
        t0 = time.monotonic_ns()
        try:
            return orig(schedule, *args, **kwargs)
        except BaseException as e:
            drop_own_frame(e)
            raise
        finally:
            depth.inside = False
            tracker.evaluating -= not grad
            rec.pop_context(token)
            rec.add_span("schedule", t0, time.monotonic_ns(), number, type(schedule).__name__, grad)
    keep_wrapper_eager(step)
    return step


_ISSUING = threading.local()   # .depth: batch functions running on this thread


def _restoring(rec):
    """A batch function wrapped: its P2POps label the context while it runs (a stage subclass
    reading an op's tensor elsewhere labels nothing), restored when it returns."""
    def enter(args, kwargs):
        _ISSUING.depth = getattr(_ISSUING, "depth", 0) + 1
        return rec.push_context()

    def leave(token):
        _ISSUING.depth -= 1
        rec.pop_context(token)

    def wrap(orig):
        scoped = in_context(rec, orig, enter, leave)
        scoped._commtrace_scope = True
        return scoped
    return wrap


def _labelling(tracker, labelled, phase, orig):
    @functools.wraps(orig)
    def build(stage, *args, **kwargs):
        ops = orig(stage, *args, **kwargs)
        label = (phase, tracker.name_of(stage.submod))
        for op in ops:
            if type(op) is labelled.__base__:
                op.__class__ = labelled
                op.__dict__["_commtrace_label"] = label
        return ops
    return build


def _labelled_class(rec, p2p_op):
    class LabelledP2POp(p2p_op):
        """A schedule's P2POp: reading its tensor in a batch (which does so to issue it) makes
        its phase and module the context's."""

        @property
        def tensor(self):
            if getattr(_ISSUING, "depth", 0):
                phase, module = self.__dict__["_commtrace_label"]
                rec.set_context_field("phase", phase)
                rec.set_context_field("module", module)
            return self.__dict__["tensor"]

        @tensor.setter
        def tensor(self, value):
            self.__dict__["tensor"] = value
    return LabelledP2POp
