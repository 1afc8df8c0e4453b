"""Ops that pass through torch's own Python plumbing on their way to the group: their call site is
the program's line, and an exception raised under them reaches the caller unchanged."""
from __future__ import annotations

import helpers as h
from helpers import worker


def test_deprecated_ops_placed_at_the_caller_and_a_dispatch_mode_error_kept(tmp_path):
    plain = h.run([h.PY, worker("torch_plumbing.py"), tmp_path / "store.plain"], timeout=120).check(0)
    assert plain.stdout == "raised ValueError refused by the mode\n"
    run_dir = tmp_path / "run"
    traced = h.run(h.commtrace_cmd(run_dir, worker("torch_plumbing.py"), tmp_path / "store.traced"),
                   timeout=120).check(0)
    # Regression (native wrapper): the mode's ValueError, pending in the interpreter while the op
    # was recorded failed, was cleared by that recording: "SystemError: <built-in method allreduce
    # ...> returned NULL without setting an exception".
    assert traced.stdout == plain.stdout
    df = h.load(run_dir).sort_values("t_start_ns")
    assert [(str(o), str(s)) for o, s in zip(df["op"], df["status"])] == [
        ("all_gather", "completed"), ("reduce_scatter", "completed"), ("all_reduce", "failed")]
    # Regression: typing_extensions' deprecated() wrapper, which torch 2.13 puts around
    # all_gather_into_tensor and reduce_scatter_tensor, was taken for their caller.
    assert {str(c).rsplit(":", 2)[0] for c in df["callsite"]} == {"tests/capture/workers/torch_plumbing.py"}


def test_torchscript_compiles_a_call_to_dist_autograd_backward(tmp_path):
    """commtrace wraps ``torch.distributed.autograd.backward`` (RPC trainers' backward pass);
    TorchScript finds that function's op by its identity, and a scripted call of the wrapper
    failed to compile ("module, class, method, function ... expected, got
    builtin_function_or_method"; found running torch's JitDistAutogradTest traced). The wrapper
    now resolves to the same op, as untraced."""
    script = worker("scripted_dist_backward.py")
    plain = h.run([h.PY, script], timeout=120).check(0).stdout
    traced = h.run(h.commtrace_cmd(tmp_path / "run", script), timeout=120).check(0).stdout
    assert "scripted True" in plain
    assert traced == plain
