"""Bounded mode's pure parts: option parsing, the ring file, record selection and
counting, reading ring segments and coverage files (hostile ones too), and
check's rule for what a bounded member's missing record means."""
from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pandas as pd
import pytest

from commtrace.analysis.bounded_coverage import coverage_text, judged_frame
from commtrace.capture.bounded import CallOrder, Coverage, Options, make_options, options_from_env
from commtrace.trace import schema
from commtrace.trace.coverage import describe, keep_last_records, read_coverage, read_segments
from commtrace.trace.step_range import StepRange, parse_steps
from commtrace.trace.writer import RecordFile, TraceWriter


def test_step_windows_contain():
    """The syntax itself: tests/trace/test_steps.py; here what bounded mode selects."""
    steps = np.arange(1, 10)
    assert steps[parse_steps("3:5").contains(steps)].tolist() == [3, 4, 5]
    assert steps[parse_steps("every:4").contains(steps)].tolist() == [4, 8]
    assert steps[parse_steps("7:").contains(steps)].tolist() == [7, 8, 9]
    assert steps[parse_steps(":2").contains(steps)].tolist() == [1, 2]


def test_options_from_values_and_environment():
    assert make_options(None, None) is None
    assert make_options("100", "every:5") == Options(100, StepRange(every=5))
    with pytest.raises(ValueError, match="keep_last"):
        make_options(0, None)
    with pytest.raises(ValueError, match="COMMTRACE_STEPS"):
        options_from_env({schema.ENV_STEPS: "3-4"})
    opts = Options(7, StepRange(2, 4))
    assert options_from_env(opts.env()) == opts
    assert opts.describe() == {"keep_last": 7, "steps": "2:4"}


def _records(ts, status=schema.STATUS_COMPLETED, sig=0, group=0, seq=None, d_end=1000.0):
    out = np.zeros(len(ts), dtype=schema.OP_RECORD)
    out["t_call"] = ts
    out["seq"] = seq if seq is not None else np.arange(1, len(ts) + 1)
    out["sig"], out["group"], out["status"], out["d_end"] = sig, group, status, d_end
    return out


def test_ring_file_keeps_the_last_n_and_at_most_2n(tmp_path):
    path = str(tmp_path / "x.ops.bin")
    f = RecordFile(path, keep_last=10)
    recs = _records(np.arange(1, 26))
    for a, b in ((0, 7), (7, 14), (14, 25)):
        f.write(recs[a:b])
    f.close()
    cur = np.fromfile(path, dtype=schema.OP_RECORD)
    prev = np.fromfile(path + ".1", dtype=schema.OP_RECORD)
    assert (len(prev), len(cur)) == (10, 5) and f.written == 25
    assert prev["t_call"].tolist() == list(range(11, 21)) and cur["t_call"].tolist() == list(range(21, 26))


def _span(step, t_end, phase="optimizer"):
    s = np.zeros(1, dtype=schema.SPAN_RECORD)
    s["t_begin"], s["t_end"], s["step"], s["phase"] = t_end - 5, t_end, step, schema.SPAN_PHASES.index(phase)
    return s


def test_keep_last_selects_by_call_time_not_file_order():
    # File order = the order the recorder saw ops finish: seq 2 (an async op whose
    # completion callback ran late) is written after seqs 3..5.
    rec = np.zeros(6, dtype=schema.OP_RECORD)
    rec["seq"] = [1, 3, 4, 5, 2, 6]
    rec["t_call"] = [100, 300, 400, 500, 200, 600]
    kept = keep_last_records(rec, 4)
    assert kept["seq"].tolist() == [3, 4, 5, 6]      # the last 4 called, in file order (not 4, 5, 2, 6)
    assert keep_last_records(rec, 5)["seq"].tolist() == [3, 4, 5, 2, 6]
    assert keep_last_records(rec, None) is rec and keep_last_records(rec, 6) is rec


def test_call_order_writes_by_call_time_and_holds_back_after_a_running_op():
    order = CallOrder()
    # A flush sees sync ops 3, 4 finished, async op 1 finished late, async op 2
    # (called at 200) still running: 1 is written first, 3 and 4 wait for 2.
    out = order.release(_records([300, 400, 100], seq=[3, 4, 1]), before=200)
    assert out["seq"].tolist() == [1]
    assert order.release(None, before=250)["seq"].tolist() == []    # op 2 still running
    out = order.release(_records([500, 200], seq=[5, 2]), before=600)
    assert out["seq"].tolist() == [2, 3, 4, 5]
    # The final flush writes everything it holds.
    assert order.release(_records([700], seq=[7]), before=650)["seq"].tolist() == []
    assert order.release(_records([650], seq=[6]), before=None)["seq"].tolist() == [6, 7]
    assert order.release(None, before=None) is None


def test_ring_keeps_the_last_n_called_when_async_ends_are_seen_late(tmp_path):
    # 22 ops, flushed 5 calls at a time; every third (t_call 3, 6, ...) is async and
    # seen finished one flush late (the Python wrapper polls small async ops).
    # Written in completion order, the ring of 10 would end holding 14 6 9 16 17 19 20
    # 12 15 | 22 18 21: op 13 gone, and the last 10 by call time 12, 14..22. In call
    # order exactly 13..22 remain.
    path = str(tmp_path / "x.ops.bin")
    f, order = RecordFile(path, keep_last=10), CallOrder()
    late: list = []
    for start in range(1, 23, 5):
        calls = list(range(start, min(start + 5, 23)))
        done = [t for t in calls if t % 3] + late
        late = [t for t in calls if t % 3 == 0]
        out = order.release(_records(done, seq=done), before=min(late, default=calls[-1] + 1))
        if len(out):
            f.write(out)
    f.write(order.release(_records(late, seq=late), before=None))
    f.close()
    rec, _ = read_segments(path, schema.OP_RECORD, schema.RECORD_SIZE)
    assert rec["t_call"].tolist() == sorted(rec["t_call"].tolist())          # file order is call order
    assert sorted(keep_last_records(rec, 10)["seq"].tolist()) == list(range(13, 23))


def test_steps_window_selects_and_counts():
    sigs = [{"op": "all_reduce", "bytes": 4}, {"op": "send", "bytes": 8}]
    cov = Coverage(Options(None, StepRange(2, 3)), sigs)
    spans = np.concatenate([_span(1, 100), _span(2, 200), _span(3, 300), _span(2, 190, "backward")])
    ops = _records([50, 150, 250, 350, 60], seq=[1, 2, 3, 4, 5])
    ops["status"][4] = schema.STATUS_FAILED                 # step 1, but failed: written
    running = _records([360], status=schema.STATUS_IN_FLIGHT, seq=[6])   # step 4, running: written
    kept_ops, kept_spans = cov.select(np.concatenate([ops, running]), spans)
    assert sorted(kept_ops["t_call"].tolist()) == [60, 150, 250, 360]
    assert sorted(kept_spans["step"].tolist()) == [2, 2, 3]
    # The end of the op written running is written too, however far outside the window.
    later, _ = cov.select(_records([360, 400], seq=[6, 7]), None)
    assert later["t_call"].tolist() == [360]
    assert cov.steps_done == 3 and cov.ops_seen == 7 and cov.ops_written == 4
    assert cov.counts == {(0, "all_reduce"): [3, 12, 3000, 0]}     # t=50, 350, 400
    assert cov.max_seq == {0: 7}


def test_send_recv_seqs_are_not_group_progress():
    cov = Coverage(Options(5, None), [{"op": "send", "bytes": 4}, {"op": "all_reduce", "bytes": 4}])
    cov.select(np.concatenate([_records([1, 2], sig=0, seq=[40, 41]), _records([3], sig=1, seq=[2])]), None)
    assert cov.max_seq == {0: 2}


def _bounded_run(tmp_path, keep_last=4, ops=10, doc=None):
    """A one-rank bounded trace written with the real writer."""
    w = TraceWriter(str(tmp_path), "rank0.pid1", keep_last=keep_last)
    w.write([{"type": "header", "format": "commtrace", "version": 1, "rank": 0, "pid": 1, "host": "h",
              "t_mono_ns": 1, "bounded": {"keep_last": keep_last, "steps": None}},
             {"type": "world", "world": 0, "world_id": "w", "rank": 0, "world_size": 1, "backend": "gloo"},
             {"type": "group", "id": 0, "world": 0, "world_id": "w", "name": "0", "size": 1, "rank": 0,
              "ranks": [0]},
             {"type": "sig", "id": 0, "op": "all_reduce", "bytes": 4}], _records(np.arange(1, ops + 1) * 10))
    if doc is not None:
        w.write_coverage(doc)
    w.write([{"type": "end", "exit_code": 0, "how": "exit", "t_mono_ns": 10_000}])
    w.close()
    return str(tmp_path)


def _load(run_dir, table="ops"):
    import commtrace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return commtrace.load(run_dir, table=table)


def test_reader_reads_ring_segments_and_coverage(tmp_path):
    doc = {"keep_last": 4, "ops_seen": 10, "ops_written": 10, "max_seq": [[0, 10]],
           "counts": [{"group": 0, "op": "all_reduce", "ops": 3, "bytes": 12, "time_ns": 30, "time_unknown": 0}]}
    df = _load(_bounded_run(tmp_path, doc=doc))
    assert df["seq"].tolist() == [7, 8, 9, 10]
    [p] = df.attrs["processes"]
    cov = p["coverage"]
    assert (cov["ops_kept"], cov["ops_dropped"], cov["max_seq"]) == (4, 6, [["w", "0", 10]])
    assert "last 4 ops per process kept: 4 of 10 finished ops (6 overwritten)" == coverage_text([p])
    counts = _load(str(tmp_path), table="counts")
    assert counts[["group", "op", "ops", "bytes"]].values.tolist() == [["0", "all_reduce", 3, 12]]


def test_ring_segment_absent_while_rotating_is_not_damage(tmp_path):
    run = _bounded_run(tmp_path, keep_last=5, ops=10)     # exactly two full segments
    os.remove(os.path.join(run, "rank0.pid1.ops.bin"))  # killed between the rename and the new file
    df = _load(run)
    assert df["seq"].tolist() == [1, 2, 3, 4, 5] and df.attrs["incomplete"] == []


@pytest.mark.parametrize("content", [b"not json", b"[1, 2]", json.dumps({"type": "other"}).encode(),
                                     json.dumps({"type": schema.COVERAGE_TYPE, "ops_seen": "many", "max_seq": 7,
                                                 "counts": [1, {"group": 2**70, "ops": -1}, {"group": 0}],
                                                 "ops_written": 2**80}).encode()])
def test_hostile_coverage_files_are_ignored_or_sanitized(tmp_path, content):
    run = _bounded_run(tmp_path)
    with open(os.path.join(run, "rank0.pid1" + schema.COVERAGE_SUFFIX), "wb") as f:
        f.write(content)
    df = _load(run)
    cov = df.attrs["processes"][0]["coverage"]
    assert cov["ops_kept"] == 4 and cov["counts"] == [] and cov["ops_seen"] is None and cov["ops_written"] is None
    doc, problem = read_coverage(os.path.join(run, "rank0.pid1.meta.jsonl"))
    assert (doc is None) == (problem is not None)


def test_describe_survives_garbage_options():
    cov = describe({"keep_last": 3, "steps": None}, {"max_seq": [["x", 1], [0]], "counts": "no"}, {},
                   np.zeros(0, dtype=schema.OP_RECORD))
    assert cov["max_seq"] == [] and cov["counts"] == [] and cov["first_kept_t_mono_ns"] is None


def test_check_judges_only_what_a_bounded_member_did_not_pass():
    # Rank 1 has no record of seq 3 (dropped: it passed seq 5) nor of seq 7 (never arrived).
    rows = [(0, s) for s in (3, 4, 5, 7)] + [(1, s) for s in (4, 5)]
    df = pd.DataFrame({"rank": [r for r, _ in rows], "seq": [s for _, s in rows], "world": "w", "group": "0",
                       "op": "all_reduce", "group_ranks": "0,1", "group_size": 2})
    procs = [{"rank": 0, "coverage": {"max_seq": [["w", "0", 7]]}},
             {"rank": 1, "coverage": {"max_seq": [["w", "0", 5]]}}]
    judged = judged_frame(df, procs)
    assert sorted(set(judged["seq"])) == [4, 5, 7]
    assert judged_frame(df, [{"rank": 0}, {"rank": 1}]) is df     # nothing bounded: unchanged
