"""Which send a recv took, on 3 gloo ranks whose messages are received out of their records' seq order
(workers/p2p_order.py): a recv from any source, then recvs from one sender posted in another tag order than
sent. Pairs are (world, group, src, dst, tag, pair_seq) (trace.p2p_order): before, the analysis paired by
the records' seq, which counts a recv from any source under another peer's counter and a sender's messages
over all tags: every pair of ranks 0 and 1 joined two messages of different sizes, rank 0's recvs from
rank 2 were one off (``check`` called one of each unmatched) and the recv from any source paired with
nothing (no time, no bandwidth)."""
from __future__ import annotations

import pandas as pd
import pytest

import helpers as h
from helpers import Launch

W = 3
MESSAGES = 6        # rank 1 -> 0: 4, rank 2 -> 0: 2


@pytest.fixture(scope="module", params=["native", "python"])
def run(request, launches) -> Launch:
    if request.param == "native":
        h.ensure_native_wrapper()
    env = h.clean_env(**({"COMMTRACE_NATIVE": "0"} if request.param == "python" else {}))
    launch = launches(f"p2p-order-{request.param}",
                      lambda tmp: h.spawn_traced("p2p_order.py", W, tmp, timeout=90, env=env))
    launch.result.check(0)
    assert h.group_wrappers(launch.run_dir) == {request.param}
    return launch


def _pairs(frame, matched) -> list:
    """Per p2p instance: its rows as (rank, op, bytes, tag), send first."""
    p2p = frame.assign(inst=matched.inst)[frame["op"].isin(["send", "recv"]).to_numpy()]
    return sorted(sorted(zip(g["rank"], g["op"].astype(str), g["bytes"], g["tag"].astype(int)),
                         key=lambda r: r[1] != "send") for _, g in p2p.groupby("inst"))


def test_each_recv_pairs_with_the_send_it_took(run):
    """Rank 0 received the sizes it expected (the worker's own check), and each instance is one send and
    the recv of the same message: same size and tag (every message has its own size)."""
    from commtrace.analysis.partitioned import analyse
    assert run.rank_json(0)["got"] == [2, 4, 3, 5, 6, 7] and run.rank_json(0)["anysource"] == 1
    v = analyse(run.run_dir, op_view=True).op_view
    pairs = _pairs(v.frame, v.matched)
    assert len(pairs) == MESSAGES, pairs
    for send, recv in pairs:
        assert send[1:2] == ("send",) and recv[0] == 0 and recv[1] == "recv"
        assert (send[2], send[3]) == (recv[2], recv[3]), (send, recv)
    assert sorted(s[2] // 4 for s, _ in pairs) == [2, 3, 4, 5, 6, 7]
    m = v.matched.instances
    assert not m.loc[m["p2p"], "untimed"].any() and (m.loc[m["p2p"], "ranks"] == 2).all()


def test_the_report_pairs_alike_whole_and_in_partitions(run):
    """--by op,variant,root,tag equals oracle.op_summary over the one frame, whole and in partitions of one
    seq each (a pair's two records have other seqs: the partitions are cut by pair_seq); every recv, the
    one from any source too, has its send's bandwidth."""
    from commtrace.analysis.partitioned import analyse
    from commtrace.analysis.report import report_json
    from oracle import op_summary
    v = analyse(run.run_dir, op_view=True).op_view
    by = ["op", "variant", "root", "tag"]
    one_frame = op_summary(v.frame, v.matched, by, v.arrays)
    assert one_frame["untimed"].sum() == 0 and one_frame.xs("recv", level="op")["algbw"].notna().all()
    for s in (analyse(run.run_dir, compare_by=by), analyse(run.run_dir, workers=1, memory_limit=1 << 10,
                                                           compare_by=by)):
        pd.testing.assert_frame_equal(s.summary(by), one_frame, check_dtype=False, check_index_type=False)
    rows = {r["op"]: r for r in report_json(analyse(run.run_dir, workers=1, memory_limit=1 << 10))["by_op"]}
    assert rows["send"]["collectives"] == rows["recv"]["collectives"] == MESSAGES
    assert rows["send"]["untimed"] == rows["recv"]["untimed"] == 0
    assert rows["send"]["algbw"] == rows["recv"]["algbw"]


@pytest.mark.parametrize("partitioned", [False, True])
def test_check_finds_every_message_received(run, partitioned):
    chk = h.commtrace_main("check", run.run_dir, *(["--partitioned"] if partitioned else []))
    assert "no matching" not in chk.stdout, chk.stdout
    chk.check(0)
