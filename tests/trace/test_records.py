"""trace.records: the one validity rule, de-duplication, slice reading and clock alignment
every reader of op records uses; and schema.OP_KINDS, the one table of op semantics."""
import numpy as np

from commtrace.analysis.summary import bus_factor
from commtrace.trace import records, schema
from commtrace.trace.reader import ProcessTrace


def _rec(rows):
    """rows: (t_call, seq, sig, group, status)."""
    out = np.zeros(len(rows), dtype=schema.OP_RECORD)
    for i, (t, seq, sig, grp, st) in enumerate(rows):
        out[i]["t_call"], out[i]["seq"], out[i]["sig"], out[i]["group"], out[i]["status"] = t, seq, sig, grp, st
    return out


DONE, FLYING = schema.STATUS_COMPLETED, schema.STATUS_IN_FLIGHT


def test_valid_is_defined_and_sane():
    rec = _rec([(10, 1, 0, 0, DONE),      # good
                (11, 2, 5, 0, DONE),      # sig 5 undefined
                (12, 3, 0, 9, DONE),      # group 9 undefined
                (13, 0, 0, 0, DONE),      # seq 0
                (0, 4, 0, 0, DONE),       # call time 0
                (14, 5, 0, 0, 77)])       # unknown status
    sigs, groups = records.defined_ids({0: {}, 1: {}}), records.defined_ids({0: {}})
    assert records.defined(rec, sigs, groups).tolist() == [True, False, False, True, True, True]
    assert records.sane(rec).tolist() == [True, True, True, False, False, False]
    assert records.valid(rec, sigs, groups).tolist() == [True, False, False, False, False, False]


def test_an_op_written_twice_keeps_its_final_record():
    rec = _rec([(10, 1, 0, 0, FLYING), (20, 2, 0, 0, DONE), (10, 1, 0, 0, DONE)])
    kept = records.last_record_per_op(rec)
    assert kept["t_call"].tolist() == [20, 10] and kept["status"].tolist() == [DONE, DONE]
    done = rec[1:]
    assert records.last_record_per_op(done) is done          # nothing in flight: the same array


def test_read_slice_reads_records_first_to_first_plus_count(tmp_path):
    rec = _rec([(t, t, 0, 0, DONE) for t in range(1, 8)])
    path = tmp_path / "r.ops.bin"
    rec.tofile(path)
    assert records.read_slice(str(path), 2, 3)["t_call"].tolist() == [3, 4, 5]
    assert records.read_slice(str(path), 5, 10)["t_call"].tolist() == [6, 7]   # fewer at the end


def test_aligner_adds_the_fitted_offset_to_call_times():
    ref = ProcessTrace("r", "r.meta.jsonl", "r.ops.bin", header={"host": "a"}, worlds=[{"world_id": "w", "rank": 0}])
    pt = ProcessTrace("p", "p.meta.jsonl", "p.ops.bin", header={"host": "b"}, worlds=[{"world_id": "w", "rank": 1}],
                      clocks=[{"type": "clock", "t_mono_ns": 100, "offset_ns": 5_000, "rtt_ns": 10, "world_id": "w",
                               "method": "gloo-pingpong"}])
    t = np.array([100, 200], dtype=np.int64)
    out = records.aligner(pt, ref)(t)
    assert out.dtype == np.int64 and out.tolist() == [5_100, 5_200]
    assert records.aligner(ref, ref)(t).tolist() == [100, 200]       # rank 0 is the reference


def test_op_kinds_table_gives_every_op_property():
    assert schema.OPS[:3] == ("all_reduce", "broadcast", "reduce") and len(schema.OPS) == 11
    assert schema.P2P_OPS == ("send", "recv")
    assert set(schema.TOTAL_SIZE_OPS) == {"all_gather", "gather", "scatter", "reduce_scatter"}
    assert schema.op_kind("all_to_all").letter == "A" and schema.op_kind("new_op") is schema.OTHER_OP
    # bus factor 2(n-1)/n, (n-1)/n or 1, from the table: 8 ranks
    assert [bus_factor(op, 8) for op in ("all_reduce", "all_gather", "broadcast", "new_op")] == [1.75, 0.875, 1.0, 1.0]


def test_which_details_mean_the_caller_waits_where_it_issues():
    from commtrace.trace import schema
    # DDP's and Join's own ops are waited for in place; an FSDP/TP role only says where an op comes from
    assert schema.detail_waits_in_place("param_check") and schema.detail_waits_in_place("bucket_rebuild")
    assert not any(schema.detail_waits_in_place(r) for r in schema.ROLE_DETAILS)
    assert not schema.detail_waits_in_place(None)
