"""pair_seq (trace.p2p_order): the number a send and the recv that took it share, on hand-made ops and
traces; the report pairs by it alike whole and in partitions, and check with it."""
from __future__ import annotations

import numpy as np
import pandas as pd

from commtrace.trace.p2p_order import PairSeqRuns, pair_seqs
from tracebuilder import Proc, write_run


def _numbered(ops: list) -> list:
    """pair_seqs of one process's ops given as (send, peer, tag, counter_peer, any_source, seq), in call order."""
    a = np.array(ops, np.int64).T if ops else np.zeros((6, 0), np.int64)
    n = a.shape[1]
    return pair_seqs(np.zeros(n), np.zeros(n), a[0], a[1], a[2], a[3], a[4], np.arange(n) * 10, a[5]).tolist()


def test_a_recv_from_any_source_counts_by_its_sender_and_tag():
    """Rank 0 takes rank 1's first message (tag 2) with a recv from any source, then recvs from rank 1
    with tags 4, 3, 4 and from rank 2 with tag 0 twice. Capture numbered the recv from any source as a recv
    from rank 2 (its tag: seq 1 of that counter), so rank 0's recvs from rank 2 have seqs 2, 3; rank 1's
    sends (tags 2, 4, 3, 4) have seqs 1..4, its recvs from rank 1 1..3."""
    recvs = _numbered([(0, 1, 2, 2, 1, 1), (0, 1, 4, 1, 0, 1), (0, 1, 3, 1, 0, 2), (0, 1, 4, 1, 0, 3),
                       (0, 2, 0, 2, 0, 2), (0, 2, 0, 2, 0, 3)])
    sends_1 = _numbered([(1, 0, 2, 0, 0, 1), (1, 0, 4, 0, 0, 2), (1, 0, 3, 0, 0, 3), (1, 0, 4, 0, 0, 4)])
    sends_2 = _numbered([(1, 0, 0, 0, 0, 1), (1, 0, 0, 0, 0, 2)])
    assert recvs == [1, 1, 1, 2, 1, 2]
    assert sends_1 == [1, 1, 1, 2] and sends_2 == [1, 2]


def test_where_earlier_ops_are_missing():
    """A counter whose seqs are not 1..n lost ops (bounded mode keeps the last N): with one tag and no recv
    from any source its seq is the number (the rule before pair_seq), else 0 (not known); a recv from any
    source whose sender is not known is 0; a whole counter is numbered in call order even so."""
    assert _numbered([(1, 0, 5, 0, 0, 3), (1, 0, 5, 0, 0, 4)]) == [3, 4]
    assert _numbered([(1, 0, 5, 0, 0, 3), (1, 0, 6, 0, 0, 4)]) == [0, 0]
    assert _numbered([(0, 1, 5, 1, 0, 1), (0, -1, 5, 5, 1, 1)]) == [1, 0]
    # a recv from any source in a counter that lost ops: its peer's and its tag's ops are not known
    assert _numbered([(0, 1, 2, 2, 1, 2), (0, 2, 0, 2, 0, 3), (0, 1, 2, 1, 0, 1)]) == [0, 0, 1]


def test_pair_seq_runs_give_back_each_ops_number():
    rec = np.zeros(6, dtype=[("group", "<u2"), ("sig", "<u2"), ("seq", "<u4")])
    rec["group"], rec["sig"], rec["seq"] = [0, 0, 0, 0, 1, 1], [3, 3, 5, 5, 3, 3], [1, 2, 3, 4, 1, 2]
    pair = np.array([1, 2, 1, 0, 2, 1])
    runs = PairSeqRuns.of(rec, pair)
    assert runs.pair_seqs(rec).tolist() == pair.tolist()
    assert runs.pair_seqs(rec[::-1][:3]).tolist() == pair[::-1][:3].tolist()
    assert len(runs.starts) < len(rec)


def _reordered_run(tmp_path, rounds: int = 12) -> str:
    """Rank 1 sends rank 0 a tag-1 then a tag-2 message per round (the tag-2 one twice as big); rank 0 posts
    its recvs in the other order (tag 2 first): pair_seq is seq's half, the seqs pair different sizes.
    An all_reduce per round between."""
    p0, p1 = Proc(0), Proc(1)
    t, seq = 0.0, {0: 0, 1: 0}
    for i in range(rounds):
        p0.op("all_reduce", t, t + 5, seq=i + 1)
        p1.op("all_reduce", t + 1, t + 5, seq=i + 1)
        for k, (tag, nbytes) in enumerate(((1, 8), (2, 16))):
            seq[1] += 1
            p1.op("send", t + 6 + k, t + 9 + k, nbytes=nbytes, seq=seq[1], group=0, root=0, tag=tag)
        for k, (tag, nbytes) in enumerate(((2, 16), (1, 8))):
            seq[0] += 1
            p0.op("recv", t + 6 + k, t + 12 + k, nbytes=nbytes, seq=seq[0], group=0, root=1, tag=tag)
        t += 20
    return write_run(tmp_path / "run", [p0, p1], end_us=t + 10)


def test_the_report_pairs_each_message_whole_and_in_partitions(tmp_path):
    """Every instance is one send and one recv of one size; the partitioned report (many chunks: a pair's
    two records lie in chunks of other seqs) equals the one frame's table (oracle), bandwidth too."""
    from commtrace.analysis.partitioned import analyse
    from oracle import op_summary
    run = _reordered_run(tmp_path)
    v = analyse(run, op_view=True).op_view
    p2p = v.frame.assign(inst=v.matched.inst)[v.frame["op"].isin(["send", "recv"]).to_numpy()]
    sizes = p2p.groupby("inst")["bytes"].agg(["min", "max", "count"])
    assert len(sizes) == 24 and (sizes["count"] == 2).all() and (sizes["min"] == sizes["max"]).all()
    by = ["op", "tag"]
    one_frame = op_summary(v.frame, v.matched, by, v.arrays)
    assert one_frame["untimed"].sum() == 0
    s = analyse(run, workers=1, memory_limit=1 << 10, compare_by=by)
    paired = ["ops", "collectives", "bytes", "algbw", "busbw", "untimed"]     # (a tiny limit sketches percentiles)
    pd.testing.assert_frame_equal(s.summary(by)[paired], one_frame[paired], check_dtype=False,
                                  check_index_type=False)


def test_check_with_sends_received_out_of_seq_order(tmp_path):
    """No send or recv is unmatched (before: the seqs' pairs were of two tags; check compared no tag and
    found none unmatched, but named the wrong send of a lone recv); a last recv with no send is."""
    import helpers as h
    run = _reordered_run(tmp_path)
    for extra in ([], ["--partitioned"]):
        chk = h.commtrace_main("check", run, *extra)
        assert "no matching" not in chk.stdout, chk.stdout
    p0, p1 = Proc(0), Proc(1)
    p1.op("send", 0, 2, nbytes=8, seq=1, root=0, tag=1)
    p0.op("recv", 0, 2, nbytes=8, seq=1, root=1, tag=2)       # another tag: not that send's recv
    run = write_run(tmp_path / "lone", [p0, p1], end_us=10)
    for extra in ([], ["--partitioned"]):
        chk = h.commtrace_main("check", run, *extra)
        assert "rank 0 recv from rank 1 #1" in chk.stdout and "rank 1 send to rank 0 #1" in chk.stdout, chk.stdout


def test_a_bounded_traces_counters_that_lost_ops(tmp_path):
    """Ops of counters whose first seqs are missing (a ring kept the last ones): one tag pairs by seq as
    before; two tags are not known: no pair, and check calls neither unmatched."""
    import helpers as h
    from commtrace.analysis.partitioned import analyse
    p0, p1 = Proc(0), Proc(1)
    for i, seq in enumerate((3, 4)):
        p1.op("send", i * 10, i * 10 + 2, nbytes=8, seq=seq, root=0, tag=7)
        p0.op("recv", i * 10, i * 10 + 3, nbytes=8, seq=seq, root=1, tag=7)
    for i, (seq, tag) in enumerate(((5, 1), (6, 2))):      # rank 0 to 1: tags 1, 2
        p0.op("send", 30 + i * 10, 32 + i * 10, nbytes=16, seq=seq, root=1, tag=tag)
        p1.op("recv", 30 + i * 10, 33 + i * 10, nbytes=16, seq=seq, root=0, tag=tag)
    run = write_run(tmp_path / "run", [p0, p1], end_us=100)
    v = analyse(run, op_view=True).op_view
    f = v.frame.assign(inst=v.matched.inst)
    assert f.loc[f["tag"] == 7, "pair_seq"].tolist() == [3, 3, 4, 4]
    assert f[f["tag"] == 7].groupby("inst").size().tolist() == [2, 2]
    assert f.loc[f["tag"] != 7, "pair_seq"].tolist() == [0, 0, 0, 0]
    assert f[f["tag"] != 7].groupby("inst").size().tolist() == [1, 1, 1, 1]
    chk = h.commtrace_main("check", run)
    assert "no matching" not in chk.stdout, chk.stdout
