"""The pure diagnosis functions on small synthetic frames (no processes, fast)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from commtrace.analysis import check as C
from commtrace.trace.reader import Run, TraceIssue

from .conftest import findings_text

COLS = ["rank", "world", "group", "group_desc", "group_ranks", "seq", "op", "variant", "shapes", "out_shapes",
        "dtype", "reduce_op", "root", "status", "t_start_ns", "t_end_ns", "callsite", "error"]


def row(rank, seq, op="all_reduce", shapes="[[10]]", dtype="float32", status="completed", t=None,
        group="0", ranks="0,1", reduce_op="SUM", root=None, variant=None, callsite="train.py:10 (step)", error=None):
    t = seq * 1_000_000 + rank * 1000 if t is None else t
    return dict(rank=rank, world="w", group=group, group_desc="default_pg" if group == "0" else None,
                group_ranks=ranks, seq=seq, op=op, variant=variant or op.replace("_", ""), shapes=shapes,
                out_shapes=shapes, dtype=dtype, reduce_op=reduce_op if op in ("all_reduce", "reduce") else None,
                root=root, status=status, t_start_ns=t, t_end_ns=None if status == "in_flight" else t + 500,
                callsite=callsite, error=error)


def frame(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLS)
    for c in ("world", "group", "group_desc", "group_ranks", "op", "variant", "shapes", "out_shapes", "dtype",
              "reduce_op", "status", "callsite", "error"):
        df[c] = df[c].astype("category")
    df["root"] = df["root"].astype("Int64")
    df["t_end_ns"] = df["t_end_ns"].astype("Int64")
    return df


def proc(rank, world_size=2, end=("exit", 0), exception=None, complete=True, dumps=(), cut=False):
    return {"file": f"rank{rank}.pid{100 + rank}.meta.jsonl", "rank": rank, "world_size": world_size,
            "end": None if end is None else {"how": end[0], "exit_code": end[1], "t_mono_ns": 10**9},
            "exception": exception, "complete": complete, "dumps": list(dumps), "cut": cut}


def mkrun(rows, procs=None, issues=(), n=2):
    return Run("/tmp/x", frame(rows), procs if procs is not None else [proc(r, n) for r in range(n)], list(issues))


def by_kind(fs):
    out = {}
    for f in fs:
        out.setdefault(f.kind, []).append(f)
    return out


def test_clean():
    rows = [row(r, s) for s in (1, 2, 3) for r in (0, 1)]
    fs = C.diagnose(mkrun(rows))
    assert C.exit_code(fs) == 0
    prog = by_kind(fs)[C.PROGRESS][0]
    assert prog.data["ranks"]["0"]["last_completed"] == 3 and prog.data["ranks"]["1"]["last_completed"] == 3
    assert "no problems found" in findings_text(fs)


def test_not_arrived_names_op_seq_ranks_and_last_callsite():
    rows = [row(r, s) for s in (1, 2) for r in (0, 1, 2)]
    rows += [row(0, 3, status="in_flight"), row(2, 3, status="in_flight")]
    rows = [dict(x, group_ranks="0,1,2") for x in rows]
    rows[4] = dict(rows[4], callsite="train.py:99 (eval)")  # rank 1's last op (seq 2)
    fs = C.diagnose(mkrun(rows, [proc(r, 3) for r in range(3)], n=3))
    f = by_kind(fs)[C.NOT_ARRIVED][0]
    assert (f.seq, f.op, f.ranks) == (3, "all_reduce", [1])
    assert f.data["entered"] == [0, 2] and f.data["waiting"] == [0, 2]
    assert f.data["last_callsite"]["1"] == "train.py:99 (eval)"
    assert "rank 1 never arrived" in f.title
    assert C.exit_code(fs) == 1
    prog = by_kind(fs)[C.PROGRESS][0].data["ranks"]
    assert prog["0"]["in_flight"] == [3] and prog["1"]["last_completed"] == 2


def test_missing_rank_without_file_never_arrived():
    rows = [row(0, 1), row(0, 2, status="in_flight")]
    fs = C.diagnose(mkrun(rows, [proc(0)]))
    k = by_kind(fs)
    assert k[C.NOT_ARRIVED][0].ranks == [1] and k[C.NOT_ARRIVED][0].seq == 1
    assert "no usable trace file" in "\n".join(k[C.NOT_ARRIVED][0].details)
    assert k[C.MISSING_RANK][0].ranks == [1]


@pytest.mark.parametrize("field,kw0,kw1,category", [
    ("op", dict(op="all_reduce"), dict(op="broadcast", root=0), "op"),
    ("sizes", dict(shapes="[[10]]"), dict(shapes="[[20]]"), "sizes"),
    ("dtype", dict(dtype="float32"), dict(dtype="float16"), "dtype"),
    ("reduce", dict(reduce_op="SUM"), dict(reduce_op="MAX"), "reduce_op"),
    ("root", dict(op="broadcast", root=0), dict(op="broadcast", root=1), "root"),
])
def test_mismatch_categories(field, kw0, kw1, category):
    rows = [row(r, 1) for r in (0, 1)] + [row(0, 2, **kw0), row(1, 2, **kw1)]
    fs = C.diagnose(mkrun(rows))
    mm = by_kind(fs)[C.MISMATCH]
    assert len(mm) == 1 and mm[0].seq == 2 and mm[0].severity == C.ERROR
    assert list(mm[0].data["categories"]) == [category]
    cat = mm[0].data["categories"][category]
    assert sorted(r for v in cat.values() for r in v) == [0, 1]


def test_variant_only_is_a_warning_and_scatter_compares_outputs():
    rows = [row(0, 1, variant="allgather"), row(1, 1, variant="_allgather_base")]
    rows = [dict(x, op="all_gather") for x in rows]
    rows += [row(0, 2, op="scatter", root=0, shapes="[[4],[4]]"), row(1, 2, op="scatter", root=0, shapes="[]")]
    rows[-2]["out_shapes"] = rows[-1]["out_shapes"] = "[[4]]"
    fs = C.diagnose(mkrun(rows))
    mm = by_kind(fs)[C.MISMATCH]
    assert len(mm) == 1 and mm[0].seq == 1 and mm[0].severity == C.WARNING
    assert C.exit_code(fs) == 0 and C.exit_code(fs, strict=True) == 1


def test_stuck_everyone_entered():
    rows = [row(r, 1) for r in (0, 1)] + [row(0, 2, status="in_flight"), row(1, 2, status="in_flight")]
    fs = C.diagnose(mkrun(rows))
    st = by_kind(fs)[C.STUCK][0]
    assert st.seq == 2 and st.ranks == [0, 1]


def test_failed_op_and_exception_and_abrupt():
    rows = [row(r, 1) for r in (0, 1)] + [row(0, 2, status="failed", error="RuntimeError: Connection closed")]
    procs = [proc(0, exception={"exc_type": "RuntimeError", "message": "Connection closed", "text": "tb"},
                  end=("exception", 1)),
             proc(1, end=None, complete=False, cut=True)]
    issues = [TraceIssue("rank1.pid101.ops.bin", "truncated mid-record (7 trailing bytes ignored)", 1)]
    fs = C.diagnose(mkrun(rows, procs, issues))
    k = by_kind(fs)
    assert k[C.FAILED][0].seq == 2 and k[C.FAILED][0].ranks == [0]
    assert "Connection closed" in k[C.FAILED][0].details[0]
    assert k[C.EXCEPTION][0].ranks == [0]
    assert k[C.ABRUPT][0].ranks == [1] and "truncated" in k[C.ABRUPT][0].title
    assert "truncated" in "\n".join(k[C.NOT_ARRIVED][0].details)
    assert C.TRACE_ISSUE not in k  # the truncation is reported once, on the rank


def test_reader_issues_go_with_the_file_they_name():
    """Rank 1's spans file is cut: told on rank 1's abrupt finding (by the file's stem, as
    its ops file would be), not as a trace_issue. A helper's file with the same problem text
    is still a trace_issue of its own (equal text is no reason to hide it)."""
    from commtrace.trace.reader import TRUNCATED
    cut = "truncated mid-record (5 trailing bytes ignored)"
    rows = [row(r, 1) for r in (0, 1)]
    issues = [TraceIssue("rank1.pid101.spans.bin", cut, 1, TRUNCATED), TraceIssue("proc.h.pid9.spans.bin", cut, None,
                                                                                   TRUNCATED)]
    k = by_kind(C.diagnose(mkrun(rows, [proc(0), proc(1, end=None, complete=False, cut=True)], issues)))
    (ab,) = k[C.ABRUPT]
    assert ab.title == "rank 1: trace truncated (process killed or disk full?)" and ab.details[-1] == cut
    assert [f.title for f in k[C.TRACE_ISSUE]] == [f"proc.h.pid9.spans.bin: {cut}"]


def test_file_names_say_stem_and_rank():
    from commtrace.trace.schema import rank_in_name, stem_of
    assert [stem_of(n) for n in ("rank1.pid7.ops.bin.1", "rank1.pid7.s2.spans.bin", "proc.h.pid3.meta.jsonl",
                                 "rank0.pid1.coverage.json", "notes.txt")] == [
        "rank1.pid7", "rank1.pid7.s2", "proc.h.pid3", "rank0.pid1", "notes.txt"]
    assert [rank_in_name(n) for n in ("rank12.pid7.meta.jsonl", "rank1.pid7.s2.ops.bin", "proc.h.pid3.meta.jsonl",
                                      "rankx.pid1.meta.jsonl", "rank1.pidx.meta.jsonl")] == [12, 1, None, None, None]


def test_exited_nonzero_and_hang_abort():
    rows = [row(r, 1) for r in (0, 1)]
    fs = C.diagnose(mkrun(rows, [proc(0, end=("hang", 3)), proc(1, end=("signal", 143))]))
    ex = by_kind(fs)[C.EXITED]
    assert [f.ranks for f in ex] == [[0], [1]]
    assert "watchdog" in ex[0].title and "SIGTERM" in ex[1].title


def test_subgroup_members_from_group_ranks():
    rows = [row(r, 1, group="1", ranks="1,2") for r in (1, 2)] + [row(1, 2, group="1", ranks="1,2", status="in_flight")]
    rows += [row(r, 1) for r in (0, 1, 2)]
    rows = [dict(x, group_ranks="0,1,2") if x["group"] == "0" else x for x in rows]
    fs = C.diagnose(mkrun(rows, [proc(r, 3) for r in range(3)], n=3))
    na = by_kind(fs)[C.NOT_ARRIVED]
    assert len(na) == 1 and na[0].group == "1" and na[0].ranks == [2] and na[0].seq == 2


def test_p2p_unmatched_is_info_unless_in_flight():
    rows = [row(0, 1, op="send", root=1), row(1, 1, op="recv", root=0),
            row(0, 2, op="send", root=1)]  # completed send, no recv: info
    rows += [row(1, 1, op="send", root=0, status="in_flight", t=5_000_000)]  # stuck send: error
    fs = C.diagnose(mkrun(rows))
    p2p = by_kind(fs)[C.P2P_UNMATCHED]
    sev = sorted((f.ranks[0], f.seq, f.severity) for f in p2p)
    assert sev == [(0, 2, C.INFO), (1, 1, C.ERROR)]
    assert C.NOT_ARRIVED not in by_kind(fs)  # p2p seq is per peer: never matched as a collective


def test_a_recv_from_any_source_takes_one_send_to_its_rank():
    """recv(src=None) records no peer: each takes one send to its rank that has no counterpart,
    completed sends first; a send beyond them is still unmatched. (Found running torch's
    DistributedTest traced: test_send_recv_any_source's completed sends were all "unmatched".)"""
    rows = [row(1, 1, op="send", root=0), row(2, 1, op="send", root=0),
            row(0, 1, op="recv", variant="recv_anysource"), row(0, 2, op="recv", variant="recv_anysource")]
    assert C.P2P_UNMATCHED not in by_kind(C.diagnose(mkrun(rows, [proc(r, 3) for r in range(3)], n=3)))
    rows += [row(1, 2, op="send", root=0, status="in_flight", t=5_000_000)]   # a third send: none took it
    p2p = by_kind(C.diagnose(mkrun(rows, [proc(r, 3) for r in range(3)], n=3)))[C.P2P_UNMATCHED]
    assert [(f.ranks, f.seq, f.severity) for f in p2p] == [([1], 2, C.ERROR)]


def test_a_recv_from_any_source_takes_a_send_from_the_rank_it_received_from():
    """Once a recv from any source completed, the trace names its sender (``root``, from its
    ``source`` line): it pairs with that rank's send, counted with that rank's other recvs in call order
    (trace.p2p_order), never by seq (its seq counts recvs from any source). Rank 0 received rank 2's
    first message by a recv from rank 2 and its second from any source; rank 1's send was never received
    (read as a recv from rank 2 #1, rank 2's second send was called unmatched too). A completed one whose
    sender has no send for it has no counterpart itself."""
    procs = [proc(r, 3) for r in range(3)]
    rows = [row(2, 1, op="send", root=0), row(0, 1, op="recv", root=2), row(2, 2, op="send", root=0),
            row(1, 1, op="send", root=0), row(0, 1, op="recv", variant="recv_anysource", root=2, t=9_000_000)]
    p2p = by_kind(C.diagnose(mkrun(rows, procs, n=3)))[C.P2P_UNMATCHED]
    assert [(f.ranks, f.op, f.seq) for f in p2p] == [([1], "send", 1)]
    rows = [row(1, 1, op="send", root=0), row(0, 1, op="recv", variant="recv_anysource", root=2)]
    p2p = by_kind(C.diagnose(mkrun(rows, procs, n=3)))[C.P2P_UNMATCHED]
    assert sorted((f.ranks[0], f.op) for f in p2p) == [(0, "recv"), (1, "send")]
    assert "rank 0 recv from rank 2 #1" in next(f.title for f in p2p if f.op == "recv")


def test_what_recvs_from_any_source_leave_open_merges_over_seq_chunks():
    """check.OpenP2P of chunks (cut by pair_seq, as check_map cuts them), merged, leaves what that of the
    whole frame does, with rows capped (a broken run's millions of sends are not carried): rank 1 sends 80
    messages to rank 0 (the last 3 in flight); rank 0 received 30 from any source naming rank 1 (they pair
    with the first 30), and 5 more are in flight (no sender known). Those take 5 of the 50 sends left
    (completed first): 45 are left, and the last 10 of them are what the rows can show (#71-#80)."""
    from commtrace.analysis.match import frame_pair_seqs
    procs = [proc(r, 2) for r in range(2)]
    rows = [row(1, s, op="send", root=0, status="in_flight" if s > 77 else "completed") for s in range(1, 81)]
    rows += [row(0, s, op="recv", variant="recv_anysource", root=1 if s <= 30 else None,
                 status="completed" if s <= 30 else "in_flight", t=10**8 + s) for s in range(1, 36)]
    df = frame(rows)
    df["pair_seq"] = frame_pair_seqs(df)        # numbered whole, as reader.build_frame does
    cut = np.where(df["pair_seq"] > 0, df["pair_seq"], df["seq"])
    whole = [(int(r["rank"]), int(r["seq"])) for r in C.unmatched_p2p(df)]
    merged = C.OpenP2P()
    recvs = []
    for lo in range(0, 90, 7):
        got, open_p2p = C.p2p_loose_ends(df[(cut > lo) & (cut <= lo + 7)])
        recvs += got
        merged.merge(open_p2p)
    assert [(int(r["rank"]), int(r["seq"])) for r in merged.unmatched(recvs)] == whole == \
        [(1, s) for s in range(71, 81)]
    assert sum(s.n for s in merged.sends.values()) == 50 and merged.anonymous == {("w", "0", 0): 5}
    assert all(len(s.rows) <= 2 * C.P2P_SHOWN for s in merged.sends.values())
    p2p = by_kind(C.diagnose(mkrun(rows, procs)))[C.P2P_UNMATCHED]
    assert sorted((f.seq, f.severity) for f in p2p) == [(s, C.INFO) for s in range(71, 78)] + [(s, C.ERROR) for s in (78, 79, 80)]


def test_straggler():
    rows = []
    for s in range(1, 9):
        base = s * 1_000_000_000
        rows += [row(0, s, t=base), row(1, s, t=base + 200_000_000)]
    fs = C.diagnose(mkrun(rows))
    st = by_kind(fs)[C.STRAGGLER]
    assert st[0].ranks == [1] and st[0].severity == C.WARNING
    assert C.exit_code(fs) == 0


def test_render_escapes_markup_and_control_chars():
    rows = [row(0, 1), row(1, 1, callsite="[bold red]evil[/] \x1b[31m"), row(0, 2, status="in_flight")]
    fs = C.diagnose(mkrun(rows))
    text = findings_text(fs)
    assert "[bold red]evil[/]" in text and "\x1b" not in text
    assert all(isinstance(f.to_dict(), dict) for f in fs)
    import json
    json.dumps([f.to_dict() for f in fs])


def test_empty_frame():
    run = Run("/tmp/x", pd.DataFrame({c: pd.Series(dtype="object") for c in ["rank", "seq", "op", "status"]}),
              [proc(0), proc(1, end=None, complete=False)], [])
    fs = C.diagnose(run)
    assert [f.kind for f in fs] == [C.ABRUPT]


def test_verdicts_and_facts_of_seq_chunks_merge_to_the_whole_frames():
    """classify_group / frame_facts over two seq chunks, merged, equal them over the whole
    frame (the partitioned check's reduce step): rank 1 calls a broadcast at seqs 2..9
    (8 mismatches, 5 kept), never arrives at seq 12, rank 0 is stuck at seq 11 and
    arrives last (by 100 ms) at every collective before."""
    rows = []
    for s in range(1, 13):
        for r in (0, 1):
            if r == 1 and s == 12:
                continue
            op = "broadcast" if r == 1 and 2 <= s <= 9 else "all_reduce"
            rows.append(row(r, s, op=op, t=s * 10**9 + r * 1000 + (10**8 if r == 0 else 0),
                            status="in_flight" if (r, s) == (0, 11) else "completed"))
    df = frame(rows)
    last = {0: 12, 1: 11}
    whole, _ = C.classify_group(df, [0, 1], last, {}, "0")
    assert (whole.n_mismatch, whole.mismatch[:5], whole.n_missing, whole.missing, whole.in_flight) == \
        (8, [2, 3, 4, 5, 6], 1, [(12, [1])], [11])
    merged = C.GroupVerdict()
    facts = C.RunFacts()
    for part in (df[df["seq"] <= 6], df[df["seq"] > 6]):
        v, _ = C.classify_group(part, [0, 1], last, {}, "0")
        v.cap()
        merged.merge(v)
        facts.merge(C.frame_facts(part, {("w", "0"): [0, 1]}))
    assert (merged.n_mismatch, merged.mismatch, merged.n_missing, merged.missing, merged.in_flight) == \
        (8, [2, 3, 4, 5, 6], 1, [(12, [1])], [11])
    one = C.frame_facts(df)
    g, h = one.groups[("w", "0")], facts.groups[("w", "0")]
    assert (h.last_entered, h.last_completed, h.in_flight, h.desc) == \
        (g.last_entered, g.last_completed, g.in_flight, g.desc) == ({0: 12, 1: 11}, {0: 12, 1: 11}, {0: [11]}, "default_pg")
    # Seqs 1-10 completed on both ranks (11 is in flight on rank 0, rank 1 has no 12): rank 0
    # arrived last at each, lag = 10^8 - 1000 ns (two members: last - first).
    s1, s2 = one.stragglers[("w", "0")], facts.stragglers[("w", "0")]
    assert s1.instances == s2.instances == 10
    assert np.array_equal(s1.lags_of(0), s2.lags_of(0)) and np.allclose(s2.lags_of(0), 10**8 - 1000)
    assert facts.t_max == one.t_max and int(facts.last_op(1)["seq"]) == int(one.last_op(1)["seq"]) == 11


def test_groups_of_later_worlds_say_which_world():
    """A program that destroyed its default group and made another (world w1): the same
    "group 0" exists twice, so every label names its world; rank 1 never reached w1's seq 2."""
    rows = ([dict(row(r, s), world="w0") for s in (1, 2) for r in (0, 1)]
            + [dict(row(r, s, t=10**10 + s * 1000 + r), world="w1") for s in (1, 2) for r in (0, 1) if (r, s) != (1, 2)])
    fs = by_kind(C.diagnose(mkrun(rows)))
    assert [f.title for f in fs[C.NOT_ARRIVED]] == [
        "group 0 (default_pg) of world w1 seq 2: all_reduce [[10]] entered by rank 0; rank 1 never arrived"]
    assert [f.title for f in fs[C.PROGRESS]] == [
        "group 0 (default_pg) of world w0: last seq completed: rank 0-1: 2",
        "group 0 (default_pg) of world w1: last seq completed: rank 0: 2; rank 1: 1"]


def test_a_rank_of_each_world_is_its_own_process():
    """Two worlds one after another (fresh processes, as a test suite spawns them): in w0 rank 1
    exits with code 7 after seq 1 and rank 0 waits in seq 2 until the hang watchdog aborts it at
    5 s; w1's ranks then run clean until 20 s. Each rank of w0 is told with w0's last op, its own
    end and its world; the wait is aged to w0's end, not to w1's."""
    def wproc(rank, world, pid, end, t_end):
        return dict(proc(rank, end=end), file=f"rank{rank}.pid{pid}.meta.jsonl", pid=pid, worlds=[world],
                    end={"how": end[0], "exit_code": end[1], "t_mono_ns": t_end})
    rows = ([dict(row(r, 1), world="w0") for r in (0, 1)] + [dict(row(0, 2, status="in_flight"), world="w0")]
            + [dict(row(r, s, t=10**10 + s * 1000 + r, callsite="train.py:20 (later)"), world="w1")
               for s in (1, 2, 3) for r in (0, 1)])
    procs = [wproc(0, "w0", 10, ("hang", 3), 5 * 10**9), wproc(1, "w0", 11, ("exit", 7), 3 * 10**9),
             wproc(0, "w1", 20, ("exit", 0), 2 * 10**10), wproc(1, "w1", 21, ("exit", 0), 2 * 10**10)]
    fs = C.diagnose(mkrun(rows, procs))
    k = by_kind(fs)
    (na,) = k[C.NOT_ARRIVED]
    assert na.world == "w0" and na.details[1:] == [
        "rank 0 entered: in_flight, waiting at least 5.0 s",
        "rank 1 never arrived: last call seq 1 all_reduce [completed] at train.py:10 (step); exited with code 7"]
    assert [(f.title, f.details, f.world) for f in k[C.EXITED]] == [
        ("rank 0 of world w0 aborted by the hang watchdog (--abort-on-hang, exit code 3)",
         ["last op: all_reduce seq 2 [in_flight] at train.py:10 (step)"], "w0"),
        ("rank 1 of world w0 exited with code 7", ["last op: all_reduce seq 1 [completed] at train.py:10 (step)"],
         "w0")]
    assert "later" not in findings_text(fs) and C.MISSING_RANK not in k


def test_a_process_of_two_worlds_is_one_fate():
    """Processes that destroyed their default group and made another (worlds w0 then w1): each is
    under both worlds, told once under its first with its last op of either; rank 1's C++-layer
    file (no world lines, same pid) is the same process."""
    rows = ([dict(row(r, s), world="w0") for s in (1, 2) for r in (0, 1)]
            + [dict(row(r, s, t=10**10 + s * 1000 + r), world="w1") for s in (1, 2) for r in (0, 1)
               if (r, s) != (1, 2)])
    procs = [dict(proc(0), pid=10, worlds=["w0", "w1"]), dict(proc(1, end=("exit", 5)), pid=11, worlds=["w0", "w1"]),
             dict(proc(1, end=None, complete=True), file="rank1.pid11.cpp.meta.jsonl", pid=11)]
    fates = C.rank_fates(mkrun(rows, procs))
    assert sorted(fates) == [("w0", 0), ("w0", 1), ("w1", 0), ("w1", 1)] and fates[("w0", 1)] is fates[("w1", 1)]
    assert fates[("w1", 1)].files == ["rank1.pid101.meta.jsonl", "rank1.pid11.cpp.meta.jsonl"]
    k = by_kind(C.diagnose(mkrun(rows, procs)))
    (na,) = k[C.NOT_ARRIVED]
    assert na.world == "w1" and na.details[-1] == (
        "rank 1 never arrived: last call seq 1 all_reduce [completed] at train.py:10 (step); exited with code 5")
    assert [(f.title, f.details) for f in k[C.EXITED]] == [
        ("rank 1 of world w0 exited with code 5", ["last op: all_reduce seq 1 [completed] at train.py:10 (step)"])]
    assert C.MISSING_RANK not in k


def test_a_run_of_one_world_names_no_world():
    fs = by_kind(C.diagnose(mkrun([row(r, 1) for r in (0, 1)])))
    assert [f.title for f in fs[C.PROGRESS]] == ["group 0 (default_pg): last seq completed: rank 0-1: 1"]


def test_straggler_lags_by_hand():
    """Per collective every member completed: the last arrival and its lag (last - median
    arrival; two members: last - first). A member's later row of a seq replaces its earlier
    one; non-members and seqs a member lacks are left out."""
    from commtrace.analysis.check.facts import straggler_lags
    done = frame([row(0, 1, t=100), row(1, 1, t=130), row(2, 1, t=110),     # seq 1: rank 1 last, 130 - 110
                  row(0, 2, t=200), row(1, 2, t=205), row(2, 2, t=260),     # seq 2: rank 2 last, 260 - 205
                  row(2, 2, t=290),                                         # ... its later row: 290 - 205
                  row(0, 3, t=300), row(1, 3, t=310),                       # seq 3: rank 2 lacks it
                  row(7, 1, t=999)])                                        # not a member
    s = straggler_lags(done, [0, 1, 2])
    assert s.instances == 2
    assert {r: [(first, a.tolist()) for first, a in v] for r, v in s.lags.items()} == {1: [(1, [20.0])],
                                                                                   2: [(1, [85.0])]}
    two = straggler_lags(done, [0, 1])          # two members: last - first
    assert {r: v[0][1].tolist() for r, v in two.lags.items()} == {1: [30.0, 5.0, 10.0]}


def test_seqs_with_differing_fields_and_absent_members():
    """classify_group: a seq whose rows differ in a compared field is a mismatch; a member
    without a row at a seq others entered is missing there (hand-made group of 3)."""
    from commtrace.analysis.check.facts import classify_group
    gdf = frame([row(0, 1, ranks="0,1,2"), row(1, 1, ranks="0,1,2"), row(2, 1, ranks="0,1,2"),
                 row(0, 2, ranks="0,1,2"), row(1, 2, ranks="0,1,2", dtype="float16"), row(2, 2, ranks="0,1,2"),
                 row(0, 3, ranks="0,1,2"), row(2, 3, ranks="0,1,2")])
    v, _ = classify_group(gdf, [0, 1, 2], {0: 3, 1: 2, 2: 3}, {}, "0")
    assert v.mismatch == [2] and v.n_mismatch == 1
    assert v.missing == [(3, [1])] and v.n_missing == 1 and not v.lost


def test_root_cause_first():
    """A rank that raised and so never arrived: its exception first, then the collective it left
    rank 0 waiting in, then rank 0's failed op and exception, then the launcher's word; warnings after."""
    F = C.Finding
    found = [
        F(C.STRAGGLER, C.WARNING, "rank 0 straggles", ranks=[0]),
        F(C.NOT_ARRIVED, C.ERROR, "seq 4: rank 1 never arrived", ranks=[1], data={"missing": [1]}),
        F(C.FAILED, C.ERROR, "seq 4 failed on rank 0", ranks=[0]),
        F(C.NO_GROUP, C.ERROR, "pid 9 (launcher) raised ProcessRaisedException"),
        F(C.EXCEPTION, C.ERROR, "rank 0 raised RuntimeError: Connection closed by peer", ranks=[0]),
        F(C.EXCEPTION, C.ERROR, "rank 1 raised RuntimeError: injected", ranks=[1]),
    ]
    assert [f.title for f in C.root_cause_first(found)] == [
        "rank 1 raised RuntimeError: injected", "seq 4: rank 1 never arrived", "seq 4 failed on rank 0",
        "rank 0 raised RuntimeError: Connection closed by peer", "pid 9 (launcher) raised ProcessRaisedException",
        "rank 0 straggles"]
    # no rank left the others waiting: an exception outside any failed op still leads, a mismatch with it
    found = [F(C.FAILED, C.ERROR, "seq 2 failed on rank 1", ranks=[1]),
             F(C.MISMATCH, C.ERROR, "seq 2: sizes differ", ranks=[0, 1]),
             F(C.EXCEPTION, C.ERROR, "rank 1 raised RuntimeError: sizes", ranks=[1]),
             F(C.EXCEPTION, C.ERROR, "rank 0 raised ValueError: bad batch", ranks=[0])]
    assert [f.title for f in C.root_cause_first(found)] == [
        "seq 2: sizes differ", "rank 0 raised ValueError: bad batch", "seq 2 failed on rank 1",
        "rank 1 raised RuntimeError: sizes"]


def _torchrun_restart_findings(restart_rank1_exit: int) -> dict:
    """check's findings by kind: a world (f00d) whose rank 1 exited with 1 after one all_reduce, then
    torchrun's restart (beef, TORCHELASTIC_RESTART_COUNT 1 in the header's launch_env): two all_reduces,
    its rank 1 exiting with ``restart_rank1_exit``."""
    def wproc(rank, world, pid, t_wall, attempt, code):
        return dict(proc(rank, end=("exit", code)), file=f"rank{rank}.pid{pid}.meta.jsonl", pid=pid, worlds=[world],
                    t_wall_ns=t_wall, launch_env={"TORCHELASTIC_RESTART_COUNT": str(attempt)})
    rows = ([dict(row(r, 1), world="f00d") for r in (0, 1)]
            + [dict(row(r, s, t=10**10 + s * 1000 + r), world="beef") for s in (1, 2) for r in (0, 1)])
    procs = [wproc(0, "f00d", 10, 100, 0, 0), wproc(1, "f00d", 11, 101, 0, 1),
             wproc(0, "beef", 20, 200, 1, 0), wproc(1, "beef", 21, 201, 1, restart_rank1_exit)]
    return by_kind(C.diagnose(mkrun(rows, procs)))


def test_worlds_are_named_as_the_report_names_them_with_torchrun_restarts():
    """Worlds are named w0, w1 in the order their processes started (the report's numbers, not the
    ids), and a torchrun restart's world says which attempt it is (TORCHELASTIC_RESTART_COUNT in
    the header's launch_env): attempt 0's rank 1 failed, attempt 1 then ran clean but its rank 1
    exited with code 7 at the end."""
    k = _torchrun_restart_findings(restart_rank1_exit=7)
    assert [(f.title, f.world) for f in k[C.EXITED]] == [
        ("rank 1 of world w0 exited with code 1", "f00d"),
        ("rank 1 of world w1 (torchrun restart 1) exited with code 7", "beef")]
    assert sorted(f.title for f in k[C.PROGRESS]) == [
        "group 0 (default_pg) of world w0: last seq completed: rank 0-1: 1",
        "group 0 (default_pg) of world w1 (torchrun restart 1): last seq completed: rank 0-1: 2"]
    assert C.RECOVERED not in k     # the restart's rank 1 exited with code 7: nothing recovered


def test_a_torchrun_restart_that_ended_well_says_it_recovered():
    """Attempt 0's rank 1 failed; torchrun's restart (attempt 1) then ended well on every rank: one
    info finding says so beside attempt 0's error, which stays (it happened)."""
    k = _torchrun_restart_findings(restart_rank1_exit=0)
    assert [(f.title, f.world) for f in k[C.EXITED]] == [("rank 1 of world w0 exited with code 1", "f00d")]
    (rec,) = k[C.RECOVERED]
    assert (rec.severity, rec.world, rec.ranks, rec.data) == (C.INFO, "beef", [0, 1], {"restart": 1})
    assert rec.title == ("world w1 (torchrun restart 1) ended well on every rank (rank 0-1): torchrun's restart "
                         "recovered from the earlier attempts' failures")
