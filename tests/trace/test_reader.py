"""Writer/reader round trips and damaged input, on real files written by TraceWriter."""
import json
import os
import warnings

import numpy as np
import pytest

from commtrace.errors import CommtraceError
from commtrace.trace import reader, schema
from commtrace.trace.writer import TraceWriter, pack_rows


def _header(rank, pid, host="h0", **kw):
    return {"type": "header", "format": "commtrace", "version": 1, "source": "python", "rank": rank,
            "pid": pid, "host": host, "t_wall_ns": 10_000, "t_mono_ns": 1_000, **kw}


def _write_rank(d, rank, rows, host="h0", clocks=(), end=True, world_size=2, extra_meta=()):
    w = TraceWriter(str(d), f"rank{rank}.pid{100 + rank}")
    meta = [_header(rank, 100 + rank, host),
            {"type": "world", "world": 0, "world_id": "w", "rank": rank, "world_size": world_size, "backend": "gloo"},
            {"type": "group", "id": 0, "world": 0, "world_id": "w", "name": "0", "desc": "default_pg",
             "backend": "gloo", "size": world_size, "rank": rank, "ranks": list(range(world_size))},
            {"type": "sig", "id": 0, "op": "all_reduce", "variant": "allreduce", "shapes": [[4]],
             "out_shapes": [[4]], "dtype": "float32", "bytes": 16, "reduce_op": "SUM", "async": False},
            {"type": "sig", "id": 1, "op": "broadcast", "variant": "broadcast", "shapes": [[2, 3]],
             "dtype": "int64", "bytes": 48, "root": 0, "async": True},
            *[{"type": "clock", **c} for c in clocks], *extra_meta]
    w.write(meta, pack_rows(rows) if rows else None)
    if end:
        w.write([{"type": "end", "exit_code": 0, "how": "exit"}], None)
    w.close()
    return w


ROWS = [
    [1_000, 1_500, 2_000, 1, 0, 0, 0, 0, 0],
    [3_000, 3_100, 0, 2, 1, 0, 0, schema.STATUS_IN_FLIGHT, 0],
]


def test_round_trip_columns_and_values(tmp_path):
    _write_rank(tmp_path, 0, ROWS)
    _write_rank(tmp_path, 1, ROWS)
    df = reader.load(str(tmp_path))
    assert len(df) == 4
    r0 = df[df["rank"] == 0].sort_values("seq")
    assert list(r0["op"]) == ["all_reduce", "broadcast"]
    assert list(r0["bytes"]) == [16, 48]
    assert list(r0["shapes"]) == ["[[4]]", "[[2,3]]"]
    assert list(r0["status"]) == ["completed", "in_flight"]
    assert r0["t_end_ns"].iloc[0] == 2_000 and r0["t_end_ns"].isna().iloc[1]
    assert r0["duration_ns"].iloc[0] == 1_000
    assert r0["root"].iloc[1] == 0 and r0["root"].isna().iloc[0]
    for col in ("rank", "group", "seq", "op", "variant", "shapes", "dtype", "bytes", "t_start_ns", "t_end_ns", "status"):
        assert col in df.columns


def test_in_flight_record_superseded_by_final(tmp_path):
    final = list(ROWS[1]); final[2] = 9_000; final[7] = schema.STATUS_COMPLETED
    _write_rank(tmp_path, 0, ROWS + [final], world_size=1)
    df = reader.load(str(tmp_path))
    assert len(df) == 2
    assert list(df.sort_values("seq")["status"]) == ["completed", "completed"]


def test_truncated_ops_file_warns_and_keeps_whole_records(tmp_path):
    _write_rank(tmp_path, 0, ROWS, world_size=1)
    ops = tmp_path / "rank0.pid100.ops.bin"
    os.truncate(ops, os.path.getsize(ops) - 5)
    with pytest.warns(reader.CommtraceWarning, match="truncated mid-record"):
        df = reader.load(str(tmp_path))
    assert len(df) == 1


def test_corrupt_meta_line_and_abrupt_end(tmp_path):
    _write_rank(tmp_path, 0, ROWS[:1], end=False, world_size=1)
    with open(tmp_path / "rank0.pid100.meta.jsonl", "ab") as f:
        f.write(b'{"type": "sig", "id": 7, "op": \n')  # corrupt line in the middle
        f.write(b'{"type":"mark","kind":"mark","label":"x","t_mono_ns":5}\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = reader.load(str(tmp_path))
    msgs = " | ".join(str(w.message) for w in caught)
    assert "corrupt metadata" in msgs and "ends abruptly" in msgs
    assert len(df) == 1


@pytest.mark.parametrize("line", [b'{"type": [], "exit_code": 0}', b'{"type": {"a": 1}}', b'{"type": 5}', b'{"id": 1}'])
def test_meta_line_without_a_type_name_is_damage(tmp_path, line):
    """A meta line is untrusted: one whose type is not a string (a list raised TypeError in the
    reader, a traceback in every command) is a corrupt line, and the rest of the file is read."""
    _write_rank(tmp_path, 0, ROWS, world_size=1)
    with open(tmp_path / "rank0.pid100.meta.jsonl", "ab") as f:
        f.write(line + b"\n")
    with pytest.warns(reader.CommtraceWarning, match="1 corrupt metadata line"):
        df = reader.load(str(tmp_path))
    assert len(df) == 2


def _rewrite_meta(path, change) -> None:
    lines = [json.loads(x) for x in open(path).read().splitlines()]
    open(path, "w").write("".join(json.dumps(change(m) or m) + "\n" for m in lines))


@pytest.mark.parametrize("field,value", [("dtype", []), ("op", {"a": 1}), ("bytes", -5), ("shapes", [[2, "x"]]),
                                         ("world_size", 2 ** 70), ("ranks", [0, 2 ** 40]), ("rank", True)])
def test_meta_fields_of_the_wrong_kind_are_damage_not_a_crash(tmp_path, field, value):
    """Fields of an untrusted meta file that are not of their kind (a list for a dtype: TypeError in
    the gradient bucket test; a world of 2^70 ranks: check built a set of that size and was killed)
    are dropped as if absent and named as damage; report and check run to the end."""
    from commtrace.analysis.partitioned import analyse
    from commtrace.analysis.partitioned.check_map import check_run
    from commtrace.analysis.report import report_json
    from commtrace.render.html_page import report_html
    _write_rank(tmp_path, 0, ROWS[:1])
    _write_rank(tmp_path, 1, ROWS[:1])
    line = {"dtype": "sig", "op": "sig", "bytes": "sig", "shapes": "sig", "ranks": "group"}.get(field, "world")
    _rewrite_meta(tmp_path / "rank1.pid101.meta.jsonl",
                  lambda m: {**m, field: value} if m["type"] == line and m.get("id", 0) == 0 else None)
    with pytest.warns(reader.CommtraceWarning, match="1 metadata field.s. of the wrong type or range ignored"):
        df = reader.load(str(tmp_path))
    assert len(df) == (1 if field == "op" else 2)   # a sig without its op is none: its records are unreadable
    # what report --json, report --html and check run, in this process
    rep = analyse(str(tmp_path), op_view=True, progress=False)
    assert "wrong type or range" in json.dumps(report_json(rep)["issues"])
    assert "<html" in report_html(rep)
    assert any("wrong type or range" in f.title for f in check_run(str(tmp_path), progress=False).findings)


def test_conform_keeps_what_writers_write_and_drops_the_rest():
    sig = {"type": "sig", "id": 3, "op": "all_reduce", "shapes": [[4, 0]], "bytes": 0, "async": None, "new_field": [1]}
    assert schema.conform(dict(sig)) == 0
    bad = dict(sig, shapes=[[-1]], bytes=True, async_=1, op=7, id=2 ** 64)
    assert schema.conform(bad) == 4 and set(bad) == {"type", "async", "new_field", "async_"}


def test_unknown_version_and_no_usable_files(tmp_path):
    _write_rank(tmp_path, 0, ROWS, world_size=1)
    p = tmp_path / "rank0.pid100.meta.jsonl"
    lines = p.read_text().splitlines()
    hdr = json.loads(lines[0]); hdr["version"] = 99
    p.write_text("\n".join([json.dumps(hdr)] + lines[1:]) + "\n")
    with pytest.raises(CommtraceError, match="unknown format version 99"):
        reader.load(str(tmp_path))


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_bad_run_dir(tmp_path, make):
    target = tmp_path / "run"
    if make == "empty":
        target.mkdir()
    elif make == "file":
        target.write_text("x")
    with pytest.raises(CommtraceError) as e:
        reader.load(str(target))
    assert str(target) in str(e.value) and "\n" not in str(e.value)


def test_missing_rank_reported(tmp_path):
    """The issue carries the world and the ranks as fields; its text writes them as rank ranges."""
    _write_rank(tmp_path, 0, ROWS, world_size=3)
    run = reader.load_run(str(tmp_path))
    (missing,) = [i for i in run.issues if i.kind == reader.RANKS_MISSING]
    assert (missing.ranks, missing.rank, missing.file) == ((1, 2), None, "")
    assert str(missing) == f"world {missing.world}: ranks missing: 1-2 of 3"


def test_many_missing_ranks_fold_like_check(tmp_path):
    """20 of 40 ranks (the odd ones) wrote nothing: the first 8 of them, then the count
    (trace.rank_ranges.fmt_ranks, as check writes rank sets)."""
    from synthetic import write_synthetic_run
    d = write_synthetic_run(str(tmp_path / "r"), ranks=40, ops_per_rank=2, missing_ranks=tuple(range(1, 40, 2)))
    (missing,) = [i for i in reader.load_run(d).issues if i.kind == reader.RANKS_MISSING]
    assert missing.ranks == tuple(range(1, 40, 2))
    assert missing.problem == "ranks missing: 1,3,5,7,9,11,13,15,... (20 ranks) of 40"


def test_clock_offsets_applied_across_hosts(tmp_path):
    _write_rank(tmp_path, 0, ROWS[:1], host="a")
    clocks = [{"offset_ns": 500, "rtt_ns": 10, "t_mono_ns": 0, "when": "start"},
              {"offset_ns": 700, "rtt_ns": 10, "t_mono_ns": 2_000, "when": "end"}]
    _write_rank(tmp_path, 1, ROWS[:1], host="b", clocks=clocks)
    df = reader.load(str(tmp_path)).set_index("rank")
    # t_call 1000 lies halfway between the two measurements: offset 600.
    assert df.loc[1, "t_start_ns"] == 1_600
    assert df.loc[0, "t_start_ns"] == 1_000


def test_undefined_sig_records_skipped(tmp_path):
    bad = list(ROWS[0]); bad[4] = 42
    _write_rank(tmp_path, 0, [ROWS[0], bad], world_size=1)
    with pytest.warns(reader.CommtraceWarning, match=r"1 of 2 op record\(s\) unreadable"):
        df = reader.load(str(tmp_path))
    assert len(df) == 1


def test_pack_rows_nan_for_unknown_times():
    rec = pack_rows([[100, 0, 0, 1, 0, 0, 0, 2, 0]])
    assert np.isnan(rec["d_return"][0]) and np.isnan(rec["d_end"][0])
    assert rec.dtype == schema.OP_RECORD and rec.itemsize == 32


def test_sig_and_group_ids_beyond_what_records_name_are_ignored(tmp_path):
    """Untrusted lines: a sig id of 2**40 must not make the reader allocate an array that big."""
    huge = [{"type": "sig", "id": 2**40, "op": "all_reduce"}, {"type": "group", "id": 2**16, "name": "x"}]
    _write_rank(tmp_path, 0, ROWS, world_size=1, extra_meta=huge)
    df = reader.load(str(tmp_path))
    assert list(df["op"]) == ["all_reduce", "broadcast"]


def test_worlds_are_numbered_in_the_order_they_were_created(tmp_path):
    """Worlds are numbered by when they were made (the world line's t_mono_ns on the wall clock,
    through its process's header start pair), not when their processes started tracing; a world
    line without t_mono_ns (an old trace) counts from its header's start. The report's numbers
    (number_worlds) and check's (world_numbers, over summaries) agree."""
    # (world id, header t_wall_ns, header t_mono_ns, world line t_mono_ns): created at
    # a: 10_000 + 8_000, b: 12_000 + 500, c: 15_000 (no t_mono_ns)
    made = [("a", 10_000, 1_000, 9_000), ("b", 12_000, 5_000, 5_500), ("c", 15_000, 7_000, None)]
    for pid, (world, wall, mono, at) in enumerate(made):
        w = TraceWriter(str(tmp_path), f"rank0.pid{pid}")
        line = {"type": "world", "world": 0, "world_id": world, "rank": 0, "world_size": 1, "backend": "gloo"}
        w.write([_header(0, pid, t_wall_ns=wall, t_mono_ns=mono), line if at is None else {**line, "t_mono_ns": at}],
                None)
        w.close()
    procs = [pt for _, pt, _ in reader.read_run_files(str(tmp_path), records=False)]
    by_file = reader.number_worlds(procs)
    numbers = {p.world_id: by_file[p.meta_path] for p in procs}
    assert numbers == {"b": 0, "c": 1, "a": 2}
    assert reader.world_numbers([p.summary() for p in procs]) == numbers
