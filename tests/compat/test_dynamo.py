"""commtrace.dynamo (a release difference, so in the smoke suite that runs on the oldest and
newest torch): a function C++ calls back while torch.compile'd code runs is
never compiled by Dynamo, by either of the two mechanisms (per-code marks on newer
torch, a wrapper that turns the frame hook off on older ones), and behaves as before."""
from __future__ import annotations

import operator
import traceback

import pytest

torch = pytest.importorskip("torch")

from commtrace import dynamo  # noqa: E402

MECHANISMS = {
    "code marks": (dynamo._code_marker, "set_code_exec_strategy (per-code frame strategies)"),
    "hook-off wrapper": (dynamo._hook_off_wrapper, "torch._C._dynamo.eval_frame.set_eval_frame/skip_code"),
}


def _skip_with(mechanism: str):
    make, capability = MECHANISMS[mechanism]
    skip = make()
    if skip is None:
        pytest.skip(f"this torch has no {capability}")
    return skip


def _multiplies(graphs) -> bool:
    return any(n.target in (operator.mul, torch.mul, torch.ops.aten.mul.Tensor)
               for g in graphs for n in g.graph.nodes)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_called_back_function_is_left_to_python(mechanism):
    import torch._dynamo

    def run(callback):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        # Dynamo runs this frame as Python but keeps its hook on for the frames it
        # calls, as DDP's _pre_forward calling the reducer, which calls the group back.
        @torch._dynamo.disable(recursive=False)
        def eager_caller(x):
            return callback(x)

        @torch.compile(backend=backend)
        def compiled(x):
            return eager_caller(x + 1) - 1

        torch._dynamo.reset()
        return compiled(torch.ones(3)), graphs

    def times_three(x):
        return x * 3

    plain, plain_graphs = run(times_three)
    assert _multiplies(plain_graphs)  # the hook compiles an unmarked callback: the setting is real

    def times_three_skipped(x):
        return x * 3

    skipped, skipped_graphs = run(_skip_with(mechanism)(times_three_skipped))
    assert torch.equal(skipped, plain) and torch.equal(plain, torch.full((3,), 5.0))
    assert skipped_graphs and not _multiplies(skipped_graphs)


def test_the_wrapper_is_invisible():
    wrap = _skip_with("hook-off wrapper")

    def fails(x):
        """doc"""
        raise ValueError(x)

    wrapped = wrap(fails)
    assert (wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__) == ("fails", "doc", fails)
    assert wrap(lambda a, b=2: a * b)(3) == 6
    with pytest.raises(ValueError) as info:
        wrapped(7)
    # the traceback goes from this test straight into the function, as unwrapped
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert names == ["test_the_wrapper_is_invisible", "fails"]


def test_class_methods_and_properties_are_covered():
    class Group:
        def op(self, x):
            return x + 1

        @property
        def name(self):
            return "g"

        @staticmethod
        def size():
            return 2

        @classmethod
        def kind(cls):
            return cls.__name__

        LIMIT = 3

    dynamo.skip_class_frames(Group)
    g = Group()
    assert (g.op(1), g.name, Group.size(), g.kind(), Group.LIMIT) == (2, "g", 2, "Group", 3)
    assert isinstance(vars(Group)["size"], staticmethod) and isinstance(vars(Group)["kind"], classmethod)
    assert isinstance(vars(Group)["name"], property)
