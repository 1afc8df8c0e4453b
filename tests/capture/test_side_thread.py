"""Labels are the issuing thread's: a collective from a Python thread of the program (a metrics
all_reduce, an object collective) is not in the main thread's phase or module, is never a DDP
bucket, and leaves the main thread's labels as they are; a thread that trains keeps its labels. tests/capture/workers/side_thread.py."""
from __future__ import annotations

import pytest

import helpers as h

W, STEPS = 2, 3  # as workers/side_thread.py


@pytest.fixture(scope="module")
def side(launches):
    return launches("side_thread", lambda tmp: h.spawn_traced("side_thread.py", W, tmp, timeout=180))


def test_side_thread_op_has_no_main_thread_label(side):
    side.result.check(0)
    df = side.frame
    for r in range(W):
        assert side.rank_json(r) == [3.0] * (2 * STEPS)
        d = df[df["rank"] == r]
        metrics = d[d["thread"] == "metrics"]
        # Before: phase forward / backward and module Sequential (the main thread's), and the
        # backward one was DDP's bucket 0 (its real bucket then numbered 1).
        assert metrics.groupby("op", observed=True).size().to_dict() == {"all_reduce": 2 * STEPS,
                                                                           "all_gather": 2 * 2 * STEPS}
        assert metrics["phase"].isna().all() and metrics["module"].isna().all() and metrics["bucket"].isna().all()
        # The object collective's scope is the thread's own: sizes then payload, named after it.
        objects = metrics[metrics["op"] == "all_gather"]
        assert set(objects["api"].astype(str)) == {"all_gather_object"}
        assert list(objects["detail"].astype(str)) == ["object_sizes", "object_payload"] * 2 * STEPS
        main = d[(d["thread"] == "MainThread") & (d["phase"] == "backward")]
        assert list(main["bucket"]) == [0] * STEPS and set(main["module"]) == {"Sequential"}
        # The main thread's labels are its own to the end (a side thread's scope once left them stale).
        got = {(str(p), str(det), str(o)): int(n) for (p, det, o), n in d[d["thread"] == "MainThread"].groupby(
               ["phase", "detail", "op"], observed=True, dropna=False).size().items() if n}
        assert got == {("ddp_init", "param_check", "all_gather"): 1, ("ddp_init", "param_check", "broadcast"): 1,
                       ("ddp_init", "module_state", "broadcast"): 1, ("forward", "bucket_rebuild", "broadcast"): 2,
                       ("backward", "nan", "all_reduce"): STEPS, ("nan", "nan", "barrier"): 1}, got
        # The thread that trains labels its own ops.
        trained = d[d["thread"] == "trainer"]
        got = {(str(p), str(m), str(o)): int(n) for (p, m, o), n in
               trained.groupby(["phase", "module", "op"], observed=True).size().items() if n}
        assert got == {("ddp_init", "Sequential#2", "all_gather"): 1, ("ddp_init", "Sequential#2", "broadcast"): 2,
                       ("backward", "Sequential#2", "all_reduce"): 1}, got
        assert list(trained.loc[trained["phase"] == "backward", "bucket"]) == [0]


def test_optimizer_steps_of_two_threads_end_their_own_spans(tmp_path):
    """Thread A's step ends while thread B's runs: each span is its own step's (before, A's end
    closed B's span, and B's all_reduce fell after its own step's end). The ops' phase is not
    checked: threads that train share the process's annotation context (README, Known
    limitations), so B's op after A's step ended has none."""
    res = h.spawn_traced("threads_stepping.py", 1, tmp_path, timeout=120)
    res.result.check(0)
    assert res.rank_json(0) == {"StepA": 1.0, "StepB": 1.0}
    ops = res.frame
    spans = h.load(res.run_dir, table="spans")
    opt = spans[spans["phase"] == "optimizer"]
    assert sorted(opt["module"].astype(str)) == ["StepA", "StepB"], opt
    for thread, label in (("A", "StepA"), ("B", "StepB")):
        op = ops[(ops["thread"] == thread) & (ops["op"] == "all_reduce")].iloc[0]
        span = opt[opt["module"] == label].iloc[0]
        assert span["t_begin_ns"] <= op["t_start_ns"] and op["t_end_ns"] <= span["t_end_ns"], (thread, span, op)
