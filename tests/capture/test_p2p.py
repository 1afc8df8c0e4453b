"""Point-to-point ops on 3 spawned gloo ranks: send/recv, isend/irecv, batch_isend_irecv, recv(src=None)."""
from __future__ import annotations

import pandas as pd
import pytest

import helpers as h
from helpers import Launch

F = 4
W = 3

@pytest.fixture(scope="module", params=["native", "python"])
def p2p(request, launches) -> Launch:
    # "python": COMMTRACE_NATIVE=0, whose async CPU p2p works are handed back wrapped
    # (wrapper._WatchedP2PWork): source_rank, batches and waits must behave as untraced.
    env = h.clean_env(**({"COMMTRACE_NATIVE": "0"} if request.param == "python" else {}))

    def go(tmp):
        return h.spawn_traced("p2p.py", W, tmp, timeout=90, env=env)
    return launches(f"p2p-{request.param}", go)


def test_p2p_program_exits(p2p):
    # Regression: a second wait() on a finished gloo send/recv Work blocks forever; the
    # recorder must never wait on works the caller already waited (traced runs hung at exit).
    p2p.result.check(0)


def _p2p_rows(df, r):
    d = df[(df["rank"] == r) & df["op"].isin(["send", "recv"])].sort_values("t_start_ns")
    return [(str(o), int(b), None if pd.isna(root) else int(root), None if pd.isna(t) else int(t), bool(a))
            for o, b, root, t, a in zip(d["op"], d["bytes"], d["root"], d["tag"], d["async"])]


def test_p2p_exact(p2p):
    p2p.result.check(0)
    df = p2p.frame
    for r in range(W):
        nxt, prv = (r + 1) % W, (r - 1) % W
        # Regression: isend, irecv and batch_isend_irecv are async (the caller waits, maybe
        # after computing: a pipeline schedule's sends); only send and recv wait where called.
        ring = [("send", 4 * F, nxt, 0, False), ("recv", 4 * F, prv, 0, False)] if r == 0 else \
               [("recv", 4 * F, prv, 0, False), ("send", 4 * F, nxt, 0, False)]
        exp = ring + [("send", 5 * F, nxt, 3, True), ("recv", 5 * F, prv, 3, True),
                      # batch_isend_irecv on a ProcessGroup subclass: separate send and recv
                      ("send", 6 * F, nxt, 0, True), ("recv", 6 * F, prv, 0, True)]
        if r == 0:   # recv_anysource: no peer at the call; the rank it received from once it completed
            exp += [("recv", 2 * F, src, 7, False) for src in p2p.rank_json(0)["anysource"]]
        else:
            exp += [("send", 2 * F, 0, 7, False)]
        assert _p2p_rows(df, r) == exp, r
        assert p2p.rank_json(r)["ok"] == {"ring": True, "isend": True, "batch": True}
    assert sorted(p2p.rank_json(0)["anysource"]) == [1, 2]
    assert set(df["status"]) == {"completed"}
    any_rows = df[(df["rank"] == 0) & (df["variant"] == "recv_anysource")]
    assert len(any_rows) == W - 1
    check_p2p_seq(df)


def test_check_matches_sends_to_a_recv_from_any_source(p2p):
    """rank 0's recv(src=None) names no peer at the call; check must not call the sends it received
    unmatched (found on torch's DistributedTest, test_send_recv_any_source)."""
    p2p.result.check(0)
    chk = h.commtrace_main("check", p2p.run_dir)
    assert "no matching" not in chk.stdout, chk.stdout
    chk.check(0)


def test_a_recv_from_any_source_is_no_part_of_a_collective_in_the_report(p2p):
    """A recv from any source pairs with the send it received (trace.p2p_order): before, the partitioned
    analysis keyed it, peerless, as a collective, and rank 0's first one was part of the world group's
    barrier (seq 1 too): the barrier, 0 bytes, had a bandwidth, "observed" by polling, and the recvs' was
    not the sends'."""
    from commtrace.analysis.partitioned import analyse
    from commtrace.analysis.report import report_json
    p2p.result.check(0)
    rows = {r["op"]: r for r in report_json(analyse(p2p.run_dir))["by_op"]}
    assert (rows["barrier"]["collectives"], rows["barrier"]["busbw"], rows["barrier"]["observed"]) == (1, None, 0)
    assert rows["recv"]["collectives"] == rows["send"]["collectives"] == 3 * W + W - 1
    assert rows["recv"]["busbw"] == rows["send"]["busbw"] and rows["recv"]["untimed"] == 0


def test_the_tables_of_recvs_from_any_source_equal_the_one_frames(p2p):
    """--by op,variant,root, whole and in partitions, equals oracle.op_summary over the one frame, bandwidth
    too: a recv from any source pairs with the send it received, of its sender and tag (trace.p2p_order).
    Once, the frame's matching paired rank 0's recvs from any source by the rank they received from and their
    seq, which counts recvs from any source: the second one joined rank 2's isend and rank 0's irecv (tag 3)
    as a 3-op instance."""
    from commtrace.analysis.partitioned import analyse
    from oracle import op_summary
    p2p.result.check(0)
    v = analyse(p2p.run_dir, op_view=True).op_view
    by = ["op", "variant", "root"]
    one_frame = op_summary(v.frame, v.matched, by, v.arrays)
    anysource = one_frame.xs("recv_anysource", level="variant")
    assert anysource["ops"].sum() == W - 1 and anysource["algbw"].notna().all()
    assert (anysource["untimed"] == 0).all()
    for s in (analyse(p2p.run_dir, compare_by=by), analyse(p2p.run_dir, workers=1, memory_limit=1 << 10,
                                                           compare_by=by)):
        pd.testing.assert_frame_equal(s.summary(by), one_frame, check_dtype=False, check_index_type=False)


def check_p2p_seq(df):
    """p2p seq numbers count per (op, peer): the k-th send s->d matches the k-th recv on d from s."""
    for s in range(W):
        for d in range(W):
            if s == d:
                continue
            sends = df[(df["rank"] == s) & (df["op"] == "send") & (df["root"] == d)]
            recvs = df[(df["rank"] == d) & (df["variant"] == "recv") & (df["root"] == s)]
            assert sends.sort_values("t_start_ns")["seq"].tolist()[:len(recvs)] == \
                recvs.sort_values("t_start_ns")["seq"].tolist() == list(range(1, len(recvs) + 1)), (s, d)
            assert sends.sort_values("t_start_ns")["bytes"].tolist()[:len(recvs)] == \
                recvs.sort_values("t_start_ns")["bytes"].tolist(), (s, d)


def test_blocking_p2p_on_a_python_backend_whose_work_only_waits(tmp_path):
    """dist.send/recv on a Python backend whose Work implements wait() only (no future, never
    is_completed(); PyTorch's own test backends are such): the op ended when the call returned.
    (Found running test_c10d_common.py's PythonProcessGroupExtensionTest traced: every send and
    recv stayed in flight, with no end, after the program had moved on.)"""
    run = h.spawn_traced("pybackend_p2p.py", 2, tmp_path, timeout=120)
    run.result.check(0)
    assert [run.rank_json(r)["got"] for r in range(2)] == [[11.0] * 3, [10.0] * 3]
    df = run.frame
    p2p = df[df["op"].isin(["send", "recv"])]
    assert len(p2p) == 8 and set(p2p["status"]) == {"completed"}, p2p[["rank", "op", "status"]]
    assert (p2p["t_end_ns"] >= p2p["t_start_ns"]).all()
    assert not p2p["async"].any()


@pytest.mark.parametrize("wrapper", ["native", "python"])
def test_a_recv_whose_wait_raised_is_recorded_failed(tmp_path, wrapper):
    """An irecv whose sender went away: its wait() raised, so the trace says failed, with the
    backend's message. (Found running PyTorch's pipelining schedule tests traced: gloo's p2p
    Work has no future, its end is seen by polling, and a polled end was always "completed".)
    Both wrappers; the Python one (COMMTRACE_NATIVE=0, Python-written backends) learns it from
    the wait() it forwards, and torch prints no deprecation warning (Work.exception is not read)."""
    if wrapper == "native":
        h.ensure_native_wrapper()
    env = h.clean_env(**({"COMMTRACE_NATIVE": "0"} if wrapper == "python" else {}))
    run = h.spawn_traced("p2p_peer_gone.py", 2, tmp_path, timeout=120, env=env)
    run.result.check(0)
    assert run.rank_json(1)["raised"], "the recv's wait did not raise: nothing to record"
    assert h.group_wrappers(run.run_dir) == {wrapper}
    recv = run.frame[(run.frame["rank"] == 1) & (run.frame["op"] == "recv")]
    assert len(recv) == 1, recv
    assert recv["status"].astype(str).tolist() == ["failed"], recv[["status", "error"]]
    assert "RuntimeError" in str(recv["error"].iloc[0])
    assert "deprecated" not in run.result.stderr


def test_a_p2p_op_written_completed_whose_wait_then_raised_is_failed(tmp_path):
    """A p2p Work reported is_completed() (the flush wrote the recv completed) and the caller's
    wait() raised after: the op is written again, failed, with the backend's message; readers keep
    an op's last record. Python wrapper (a backend written in Python, without a future); the native
    wrapper reads gloo's completion and exception together (both set by its wait)."""
    run = h.spawn_traced("p2p_done_then_raise.py", 2, tmp_path, timeout=120)
    run.result.check(0)
    got = run.rank_json(1)
    assert got["raised"] and got["status_before_wait"] == "completed", got
    assert h.group_wrappers(run.run_dir) == {"python"}
    recv = run.frame[(run.frame["rank"] == 1) & (run.frame["op"] == "recv")]
    assert len(recv) == 1, recv
    assert recv["status"].astype(str).tolist() == ["failed"], recv[["status", "error"]]
    assert "peer gone" in str(recv["error"].iloc[0])


@pytest.mark.parametrize("wrapper", ["native", "python"])
def test_a_failed_op_is_recorded_with_the_exception_python_raised(tmp_path, wrapper):
    """A collective that raises at the call is recorded failed under the exception type the
    program catches: torch raises its c10 ValueError (a non-contiguous all_to_all_single
    input) as ValueError, a plain c10 error as RuntimeError. (Found running test_c10d_common's
    ``test_all_to_all_single`` traced: the native wrapper wrote every c10 error as
    RuntimeError, so ``check`` named an error the program never saw.)"""
    if wrapper == "native":
        h.ensure_native_wrapper()
    env = h.clean_env(**({"COMMTRACE_NATIVE": "0"} if wrapper == "python" else {}))
    run = h.spawn_traced("op_error_types.py", 1, tmp_path, timeout=120, env=env)
    run.result.check(0)
    assert h.group_wrappers(run.run_dir) == {wrapper}
    raised = run.rank_json(0)["raised"]
    expected = [["all_to_all", "ValueError"], ["all_reduce", "RuntimeError"]]
    if raised and raised[0][0] != "all_to_all":   # torch 2.4's gloo takes the non-contiguous input
        expected = expected[1:]
    assert [[op, text.split(":")[0]] for op, text in raised] == expected, raised
    failed = run.frame[run.frame["status"].astype(str) == "failed"].sort_values("seq")
    assert failed["op"].tolist() == [op for op, _ in raised], failed[["op", "error"]]
    for (_, seen), recorded in zip(raised, failed["error"]):
        assert str(recorded).startswith(seen.splitlines()[0]), (seen, recorded)
