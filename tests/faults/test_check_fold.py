"""Ranks with equal state fold into rank ranges, so ``commtrace check`` stays readable at
1024 ranks: the helpers with hand-written expected text, each finding that names
ranks on small synthetic frames, and one run of 1024 ranks through the real CLI
(both check paths)."""
from __future__ import annotations

import os

import pytest

from commtrace.analysis import check as C
from commtrace.trace.rank_ranges import (FOLD_SHOWN, WORLD_STRIDE, fmt_rank_keys, fmt_ranks, fold_ranks, folded_inline,
                                         folded_lines)
from commtrace.trace.reader import Run

from commtrace.trace.reader import load_run

from .conftest import assert_same_findings, check_cli, findings_text, kinds, partitioned_findings
from .test_check_unit import frame, mkrun, proc, row


# -- the helpers ---------------------------------------------------------------------

def test_fmt_ranks_ranges_and_cap():
    assert fmt_ranks([5, 0, 1, 2, 3]) == "0-3,5"
    assert fmt_ranks([]) == "-"
    assert fmt_ranks(list(range(700)) + list(range(701, 1024))) == "0-699,701-1023"
    # 20 singletons: the first 8, then how many in all.
    assert fmt_ranks(range(0, 40, 2)) == "0,2,4,6,8,10,12,14,... (20 ranks)"
    assert fmt_ranks(range(0, 40, 2), max_parts=None).endswith(",36,38")


def test_fmt_rank_keys_folds_runs_of_alike_worlds():
    """A run of many worlds one after another (mp.spawn in a loop) is one part, not one per world."""
    keys = lambda worlds: [w * WORLD_STRIDE + r for w, ranks in worlds for r in ranks]
    assert fmt_rank_keys(keys([(w, (0, 1)) for w in range(211)])) == "w0-210:r0-1"
    assert fmt_rank_keys(keys([(0, (0, 1)), (1, (0, 1))])) == "w0:r0-1 w1:r0-1"
    assert fmt_rank_keys(keys([(0, (0,)), (1, (0, 1)), (2, (0, 1)), (3, (0, 1)), (5, (0, 1))])) == \
        "w0:r0 w1-3:r0-1 w5:r0-1"
    assert fmt_rank_keys(keys([(w, range(1 + w % 2)) for w in range(20)])) == \
        "w0:r0 w1:r0-1 w2:r0 w3:r0-1 w4:r0 w5:r0-1 w6:r0 w7:r0-1 ... (20 worlds)"
    assert fmt_rank_keys([0, 1, 2, 3]) == "0-3"


def test_fold_ranks_groups_by_text_ordered_by_first_rank():
    text = {4: "completed", 0: "completed", 3: "in_flight", 1: "completed", 2: "completed", 5: "completed"}
    assert fold_ranks(text) == [([0, 1, 2, 4, 5], "completed"), ([3], "in_flight")]
    assert folded_lines(text) == ["rank 0-2,4-5: completed", "rank 3: in_flight"]
    assert folded_inline({0: "50", 1: "50", 2: "25"}) == "rank 0-1: 50; rank 2: 25"


def test_folded_lines_cap_with_k_more():
    text = {r: f"age {r}" for r in range(FOLD_SHOWN + 3)}      # every rank differs
    lines = folded_lines(text, line=lambda rs, t: f"rank {rs} entered: {t}")
    assert lines == [f"rank {r} entered: age {r}" for r in range(FOLD_SHOWN)] + ["... and 3 more ranks"]
    assert folded_lines({0: "a", 1: "b"}, shown=1) == ["rank 0: a", "... and 1 more rank"]


# -- the findings ---------------------------------------------------------------------

def six(rows):
    return [dict(x, group_ranks="0,1,2,3,4,5") for x in rows]


def test_not_arrived_six_ranks_exact_details_and_progress_line():
    """Ranks 0-2,4-5 complete seq 1 and 2; rank 3 only seq 1, then exits: it never arrived at seq 2."""
    rows = six([row(r, s) for s in (1, 2) for r in range(6) if (r, s) != (3, 2)])
    fs = C.diagnose(mkrun(rows, [proc(r, 6) for r in range(6)], n=6))
    na = kinds(fs)[C.NOT_ARRIVED][0]
    assert na.title == ("group 0 (default_pg) seq 2: all_reduce [[10]] entered by rank 0-2,4-5; "
                        "rank 3 never arrived")
    assert na.details == [
        "op: all_reduce [[10]] float32 SUM called at train.py:10 (step)",
        "rank 0-2,4-5 entered: completed",
        "rank 3 never arrived: last call seq 1 all_reduce [completed] at train.py:10 (step); exited normally",
    ]
    assert na.data["entered"] == [0, 1, 2, 4, 5] and na.data["missing"] == [3]     # data: per rank, unchanged
    prog = kinds(fs)[C.PROGRESS][0]
    assert prog.title == "group 0 (default_pg): last seq completed: rank 0-2,4-5: 2; rank 3: 1"
    assert prog.data["ranks"]["3"]["last_completed"] == 1 and prog.data["ranks"]["5"]["last_completed"] == 2


def test_not_arrived_distinct_waits_are_capped():
    """Ranks 0-10 wait at seq 2 since 50 ms apart (ages differ: one line each), rank 11
    never arrives: 8 lines, then the 3 ranks left."""
    n = 12
    rows = [row(r, 1, t=r) for r in range(n)]
    rows += [row(r, 2, status="in_flight", t=r * 50_000_000) for r in range(n - 1)]
    rows = [dict(x, group_ranks=",".join(map(str, range(n)))) for x in rows]
    fs = C.diagnose(mkrun(rows, [proc(r, n) for r in range(n)], n=n))    # ends at 1 s: the latest time known
    na = kinds(fs)[C.NOT_ARRIVED][0]
    ages = ["1.0 s", "950 ms", "900 ms", "850 ms", "800 ms", "750 ms", "700 ms", "650 ms"]
    assert na.details[1:] == [f"rank {r} entered: in_flight, waiting at least {a}" for r, a in enumerate(ages)] + [
        "... and 3 more ranks",
        "rank 11 never arrived: last call seq 1 all_reduce [completed] at train.py:10 (step); exited normally"]
    assert na.data["waiting"] == list(range(11))


def test_stuck_and_failed_fold_equal_texts():
    rows = [row(r, 1, ranks="0,1,2,3") for r in range(4)]
    rows += [row(r, 2, ranks="0,1,2,3", status="in_flight") for r in range(4)]
    procs = [proc(r, 4, end=("signal", 143)) for r in range(4)]
    fs = C.diagnose(mkrun(rows, procs, n=4))
    st = kinds(fs)[C.STUCK][0]
    assert st.title.endswith("never finished on rank 0-3")
    assert st.details[1:] == ["rank 0-3: terminated by SIGTERM (exit code 143)"]
    ex = kinds(fs)[C.EXITED]
    assert len(ex) == 1 and ex[0].ranks == [0, 1, 2, 3]
    assert ex[0].title == "rank 0-3 terminated by SIGTERM (exit code 143)"
    assert ex[0].details == ["last op: all_reduce seq 2 [in_flight] at train.py:10 (step)"]

    err = "RuntimeError: Connection closed by peer"
    rows = [row(r, 1, ranks="0,1,2,3") for r in range(4)]
    rows += [row(r, 2, ranks="0,1,2,3", status="failed", error=err if r != 2 else "timeout") for r in range(4)]
    fl = kinds(C.diagnose(mkrun(rows, [proc(r, 4) for r in range(4)], n=4)))[C.FAILED][0]
    assert fl.details == [f"rank 0-1,3: {err}", "rank 2: timeout"]


def test_mismatch_split_and_rows_fold():
    rows = [row(r, 1, ranks="0,1,2,3", shapes="[[16]]" if r < 3 else "[[32]]") for r in range(4)]
    mm = kinds(C.diagnose(mkrun(rows, [proc(r, 4) for r in range(4)], n=4)))[C.MISMATCH][0]
    assert mm.details == ["sizes: [[16]] on rank 0-2; [[32]] on rank 3",
                          "rank 0-2: all_reduce [[16]] float32 SUM [completed] at train.py:10 (step)",
                          "rank 3: all_reduce [[32]] float32 SUM [completed] at train.py:10 (step)"]
    assert mm.data["categories"]["sizes"] == {"[[16]]": [0, 1, 2], "[[32]]": [3]}


def test_ranks_that_ended_alike_are_one_finding():
    """Ranks 1-4 raise the same exception (their last ops differ), ranks 5-6 end abruptly."""
    exc = {"exc_type": "RuntimeError", "message": "boom", "text": "Traceback\n  File x\nRuntimeError: boom"}
    n = 7
    rows = [row(r, 1, ranks="0,1,2,3,4,5,6") for r in range(n)] + [row(r, 2, ranks="0,1,2,3,4,5,6") for r in (0, 1, 2)]
    procs = [proc(0, n)] + [proc(r, n, exception=exc, end=("exception", 1)) for r in (1, 2, 3, 4)]
    procs += [proc(r, n, end=None, complete=False) for r in (5, 6)]
    fs = kinds(C.diagnose(mkrun(rows, procs, n=n)))
    (e,) = fs[C.EXCEPTION]
    assert (e.title, e.ranks) == ("rank 1-4 raised RuntimeError: boom", [1, 2, 3, 4])
    assert e.details == ["rank 1-2: last op: all_reduce seq 2 [completed] at train.py:10 (step)",
                         "rank 3-4: last op: all_reduce seq 1 [completed] at train.py:10 (step)",
                         "Traceback", "  File x", "RuntimeError: boom"]
    assert e.data == {"exc_type": "RuntimeError", "message": "boom"}
    (a,) = fs[C.ABRUPT]
    assert a.ranks == [5, 6] and a.title == "rank 5-6: trace ends abruptly (killed, e.g. SIGKILL, or still running)"


def test_dumps_of_one_reason_are_one_finding():
    dumps = {r: [{"path": f"hang.rank{r}.pid{100 + r}.json", "reason": "hang"}] for r in range(4)}
    dumps[0].append({"path": "sigusr1.rank0.pid100.json", "reason": "SIGUSR1"})
    rows = [row(r, 1, ranks="0,1,2,3") for r in range(4)]
    fs = kinds(C.diagnose(mkrun(rows, [proc(r, 4, dumps=dumps[r]) for r in range(4)], n=4)))[C.DUMP]
    usr, hang = sorted(fs, key=lambda f: f.data["reason"])   # "SIGUSR1" < "hang"
    assert hang.title == "rank 0-3: 4 state dumps (hang), the first hang.rank0.pid100.json"
    assert hang.data["paths"] == {str(r): [f"hang.rank{r}.pid{100 + r}.json"] for r in range(4)}
    assert usr.title == "rank 0: state dump (SIGUSR1) sigusr1.rank0.pid100.json" and usr.ranks == [0]


def test_ranks_that_raised_before_any_group_fold():
    exc = {"exc_type": "KeyError", "message": "'lr'", "text": "KeyError: 'lr'"}
    unranked = [{"file": f"rank{r}.pid{200 + r}.meta.jsonl", "pid": 200 + r, "ppid": 1, "host": "h",
                 "launch_env": {"RANK": str(r)}, "exception": exc, "end": {"how": "exception", "exit_code": 1},
                 "complete": True} for r in range(5)]
    run = Run("/tmp/x", frame([]), [], [], unranked=unranked)
    (f,) = [f for f in C.diagnose(run) if f.kind == C.NO_GROUP]
    assert f.title == "rank 0-4 raised KeyError: 'lr' before any process group existed"
    assert f.ranks == [0, 1, 2, 3, 4] and len(f.data["files"]) == 5 and f.details == ["KeyError: 'lr'"]


def test_1024_ranks_every_line_short_and_few():
    """1024 ranks: rank 700 never arrives at seq 2, the others wait there, rank r since
    r ms (the latest time known: 1023 ms, rank 1023's start): ranks 0-23 wait "1.0 s",
    every later rank a different number of ms. Every rank but 700 raises the same
    exception and wrote a hang dump."""
    n, members = 1024, ",".join(map(str, range(1024)))
    exc = {"exc_type": "RuntimeError", "message": "timeout", "text": "RuntimeError: timeout"}
    rows = [row(r, 1, t=r, ranks=members) for r in range(n)]
    rows += [row(r, 2, status="in_flight", t=r * 1_000_000, ranks=members) for r in range(n) if r != 700]
    procs = [proc(r, n, exception=exc if r != 700 else None, end=("exception", 1) if r != 700 else None,
                  complete=r != 700, dumps=[{"path": f"hang.rank{r}.json", "reason": "hang"}] if r != 700 else [])
             for r in range(n)]
    fs = C.diagnose(mkrun(rows, procs, n=n))
    text = findings_text(fs, verbose=True)
    lines = text.splitlines()
    assert max(map(len, lines)) < 300 and len(lines) < 60, text
    assert "rank 0-699,701-1023 raised RuntimeError: timeout" in text
    assert "group 0 (default_pg): last seq completed: rank 0-1023: 1" in text
    assert "rank 0-23 entered: in_flight, waiting at least 1.0 s" in text
    assert "rank 30 entered: in_flight, waiting at least 993 ms" in text
    # 8 lines shown (ranks 0-23, then 24..30 one each): 1023 - 31 ranks left.
    assert "... and 992 more ranks" in text
    assert "rank 0-699,701-1023: state dump" not in text and "rank 0-699,701-1023: 1023 state dumps (hang)" in text


# -- the real CLI at 1024 ranks ---------------------------------------------------------

@pytest.fixture(scope="module")
def run_1024(tmp_path_factory):
    """A synthetic run of 1024 ranks x 12 ops: rank 700's ops file cut to its first 6
    records and its end line dropped (killed), ranks 900-1023 end line dropped."""
    from synthetic import write_synthetic_run
    d = tmp_path_factory.mktemp("r1024") / "run"
    write_synthetic_run(str(d), ranks=1024, ops_per_rank=12, seed=0)
    for name in os.listdir(d):
        r = int(name[4:name.index(".")])
        p = d / name
        if name.endswith(".ops.bin") and r == 700:
            os.truncate(p, 6 * 32)
        if name.endswith(".meta.jsonl") and (r == 700 or r >= 900):
            p.write_text("".join(x for x in p.read_text().splitlines(True) if '"type":"end"' not in x))
    return d


def test_1024_ranks_check_cli_both_paths(run_1024):
    outs = []
    for args in ((), ("--partitioned",)):
        c = check_cli(run_1024, *args, timeout=180)
        assert c.returncode == 1, c.stderr[-2000:]
        lines = c.stdout.splitlines()
        assert max(map(len, lines)) < 300 and len(lines) < 30, c.stdout
        outs.append(c.stdout)
    assert outs[0] == outs[1]
    assert "rank 700 never arrived: last call seq 6" in outs[0]
    assert "rank 0-699,701-1023 entered: completed" in outs[0]
    assert "rank 700,900-1023: trace ends abruptly" in outs[0]
    assert "last seq completed: rank 0-699,701-1023: 12; rank 700: 6" in outs[0]


def test_lost_records_of_several_ranks_fold_their_causes():
    """Ranks 2 and 3 have seq 3 but no readable seq 2: they did arrive, their records are lost."""
    rows = [row(r, s, ranks="0,1,2,3") for s in (1, 2, 3) for r in range(4) if not (s == 2 and r >= 2)]
    lr = kinds(C.diagnose(mkrun(rows, [proc(r, 4) for r in range(4)], n=4)))[C.LOST_RECORD][0]
    assert lr.title == "group 0 (default_pg) seq 2: the records of rank 2-3 are unreadable"
    assert lr.details == ["rank 2-3: records missing from its trace",
                          "rank 2-3 reached seq 3 of this group, so it did call seq 2"]


def test_render_prints_at_most_8_findings_of_a_kind():
    """12 ranks whose files are each damaged (every finding names its own file): 8 printed, then the count."""
    rows = [row(r, 1, ranks=",".join(map(str, range(12)))) for r in range(12)]
    procs = [dict(proc(r, 12), damage=[f"rank{r}.pid{100 + r}.meta.jsonl has 1 corrupt line(s)"]) for r in range(12)]
    fs = C.diagnose(mkrun(rows, procs, n=12))
    assert len(kinds(fs)[C.DAMAGED]) == 12                       # --json: every one
    lines = findings_text(fs).splitlines()
    damaged = [x for x in lines if "trace damaged" in x]
    assert damaged == [f"ERROR rank {r}: trace damaged: rank{r}.pid{100 + r}.meta.jsonl has 1 corrupt line(s)"
                       for r in range(8)]
    assert "... and 4 more damaged findings (--json lists every one)" in lines


def test_ranks_damaged_alike_are_one_finding():
    """12 ranks, each with one corrupt meta line, except rank 5 with two: two findings, the
    folded one writing the file as "*.meta.jsonl"; data keeps each rank's file and damage."""
    rows = [row(r, 1, ranks=",".join(map(str, range(12)))) for r in range(12)]
    procs = []
    for r in range(12):
        bad = 2 if r == 5 else 1
        procs.append(dict(proc(r, 12), damage=[f"rank{r}.pid{100 + r}.meta.jsonl has {bad} corrupt line(s)"],
                          damage_any=[f"*.meta.jsonl has {bad} corrupt line(s)"]))
    fs = kinds(C.diagnose(mkrun(rows, procs, n=12)))[C.DAMAGED]
    assert [(f.title, f.ranks) for f in fs] == [
        ("rank 0-4,6-11: trace damaged: *.meta.jsonl has 1 corrupt line(s)", [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]),
        ("rank 5: trace damaged: rank5.pid105.meta.jsonl has 2 corrupt line(s)", [5])]
    assert fs[0].data["file"] == "rank0.pid100.meta.jsonl"
    assert fs[0].data["damage"] == ["rank0.pid100.meta.jsonl has 1 corrupt line(s)"]
    assert fs[0].data["per_rank"]["11"] == {"files": ["rank11.pid111.meta.jsonl"],
                                            "damage": ["rank11.pid111.meta.jsonl has 1 corrupt line(s)"]}
    assert len(fs[0].data["per_rank"]) == 11
    assert [x for x in findings_text(fs).splitlines() if "damaged" in x] == [
        "ERROR rank 0-4,6-11: trace damaged: *.meta.jsonl has 1 corrupt line(s)",
        "ERROR rank 5: trace damaged: rank5.pid105.meta.jsonl has 2 corrupt line(s)"]


def test_one_issue_in_many_rank_files_is_one_trace_issue():
    """Ranks 0-3 each left a second file (pid 200+r) of a newer format: one trace_issue
    naming the ranks, as the report's warning does; a helper's file with the same problem
    stays its own; the world's missing ranks are told by missing_rank, not as an issue."""
    from commtrace.trace.reader import RANKS_MISSING, UNUSABLE, TraceIssue
    newer = "unknown format version 7 (this commtrace reads 1)"
    issues = [TraceIssue(f"rank{r}.pid{200 + r}.meta.jsonl", newer, r, UNUSABLE) for r in range(4)]
    issues += [TraceIssue("pid9.meta.jsonl", newer, None, UNUSABLE),
               TraceIssue("", "ranks missing: 4 of 5", kind=RANKS_MISSING, world="w", ranks=(4,))]
    rows = [row(r, 1, ranks="0,1,2,3,4") for r in range(4)]
    run = mkrun(rows, [proc(r, 5) for r in range(4)], issues=issues, n=5)
    fs = kinds(C.diagnose(run))
    assert [(f.title, f.ranks) for f in fs[C.TRACE_ISSUE]] == [
        (f"rank 0-3 (4 files): {newer}", [0, 1, 2, 3]), (f"pid9.meta.jsonl: {newer}", [])]
    assert fs[C.TRACE_ISSUE][0].data == {"files": {str(r): [f"rank{r}.pid{200 + r}.meta.jsonl"] for r in range(4)}}
    assert [f.title for f in fs[C.MISSING_RANK]] == [
        "rank 4: no trace file (never started, or died before its first collective)"]


def test_damaged_ranks_fold_alike_on_both_check_paths(tmp_path):
    """A synthetic run of 6 ranks: ranks 0-3 get a corrupt meta line, ranks 4-5 three
    stray bytes after their op records. Both check paths: one damaged finding per kind
    of damage, naming the ranks; equal findings."""
    from synthetic import write_synthetic_run
    d = write_synthetic_run(str(tmp_path / "r"), ranks=6, ops_per_rank=6)
    for name in os.listdir(d):
        r, p = int(name[4:name.index(".")]), os.path.join(d, name)
        if name.endswith(".meta.jsonl") and r < 4:
            with open(p, "a") as f:
                f.write("{not json\n")
        if name.endswith(".ops.bin") and r >= 4:
            with open(p, "ab") as f:
                f.write(b"xyz")
    one = C.diagnose(load_run(d))
    assert_same_findings(one, partitioned_findings(d, workers=1))
    assert [(f.title, f.ranks) for f in one if f.kind == C.DAMAGED] == [
        ("rank 0-3: trace damaged: *.meta.jsonl has 1 corrupt line(s)", [0, 1, 2, 3]),
        ("rank 4-5: trace damaged: *.ops.bin truncated mid-record", [4, 5])]


def test_folded_inline_stops_at_200_characters():
    """6 groups of 16 scattered ranks (r % 6), each written in 44-45 characters: 4 of
    them and 3 separators make 182 characters, a 5th would make 229 > 200."""
    line = folded_inline({r: str(r % 6) for r in range(96)})
    assert line == ("rank 0,6,12,18,24,30,36,42,... (16 ranks): 0; rank 1,7,13,19,25,31,37,43,... (16 ranks): 1; "
                    "rank 2,8,14,20,26,32,38,44,... (16 ranks): 2; rank 3,9,15,21,27,33,39,45,... (16 ranks): 3; "
                    "... and 32 more ranks")


def test_progress_of_many_groups_uneven_first_then_capped():
    """12 two-rank subgroups (g00..g11 of ranks 2i, 2i+1), all at seq 1 except g09,
    whose rank 19 did not complete seq 2: g09 first, then g00-g06, then the 4 left."""
    rows = []
    for i in range(12):
        for r in (2 * i, 2 * i + 1):
            rows.append(row(r, 1, group=f"g{i:02d}", ranks=f"{2 * i},{2 * i + 1}"))
    rows += [row(18, 2, group="g09", ranks="18,19"), row(19, 2, group="g09", ranks="18,19", status="in_flight")]
    fs = C.diagnose(mkrun(rows, [proc(r, 24) for r in range(24)], n=24))
    text = findings_text(fs).splitlines()
    at = text.index("progress per group (last sequence number completed by each rank)")
    assert text[at + 1:] == (["  group g09: last seq completed: rank 18: 2; rank 19: 1"]
                             + [f"  group g{i:02d}: last seq completed: rank {2 * i}-{2 * i + 1}: 1" for i in range(7)]
                             + ["  ... and 4 more groups (4 of them with every member at the same seq; "
                                "--json lists every one)"])
    assert len(kinds(fs)[C.PROGRESS]) == 12


def _anysource_run(run_dir, extra_send: bool, stray_named: bool) -> str:
    """Rank 0 receives 40 messages from any source, from rank 1 and 2 in turn (its recvs' seqs
    1..40; the sends' 1..20 per sender: most pairs lie in two seq chunks); each recv names its
    sender (the ``source`` line). ``extra_send``: rank 2 sends a 21st that nobody receives (in
    flight); ``stray_named``: a 41st recv names rank 1, which sent no more."""
    from tracebuilder import Proc, ns, write_run
    from commtrace.trace import schema
    procs = [Proc(r, world_size=3) for r in range(3)]
    recvs = 41 if stray_named else 40
    for i in range(1, recvs + 1):
        src, t = (1 if i % 2 else 2), 10.0 * i
        if i <= 40:
            procs[src].op("send", t - 2, t + 1, seq=(i + 1) // 2, root=0)
        procs[0].op("recv", t - 1, t + 1, seq=i, variant="recv_anysource")
        procs[0].meta.append({"type": schema.META_SOURCE, "t_call": ns(t - 1), "group": 0, "seq": i,
                              "sig": procs[0].records[-1][4], "src": src})
    if extra_send:
        procs[2].op("send", 500.0, None, seq=21, root=0, status=schema.STATUS_IN_FLIGHT)
    return write_run(run_dir, procs)


@pytest.mark.parametrize("extra_send,stray_named", [(False, False), (True, False), (True, True)])
def test_recvs_from_any_source_pair_with_sends_of_other_seq_chunks(tmp_path, extra_send, stray_named):
    """A recv from any source counts its own seqs, so it and the send it took may lie in two seq
    chunks: the partitioned check carries what a chunk leaves open to the fold (check.OpenP2P),
    which pairs them by the one check's rule. No send is called unmatched for want of its recv
    in its chunk (before: each send whose recv lay in another chunk was); one nobody received
    still is, and so is a recv naming a sender with no send left for it."""
    d = _anysource_run(tmp_path / "r", extra_send, stray_named)
    one = C.diagnose(load_run(d))
    from commtrace.analysis.partitioned.check_map import check_run
    part = check_run(d, progress=False, partitioned=True, workers=1)
    assert part.chunks > 4
    assert_same_findings(one, part.findings)
    assert_same_findings(one, check_run(d, progress=False).findings)
    want = ([("rank 2", "send", 21, C.ERROR)] if extra_send else []) + \
        ([("rank 0", "recv", 41, C.INFO)] if stray_named else [])
    assert sorted((f.title.split(" ")[0] + " " + f.title.split(" ")[1], f.op, f.seq, f.severity)
                  for f in one if f.kind == C.P2P_UNMATCHED) == sorted(want)
