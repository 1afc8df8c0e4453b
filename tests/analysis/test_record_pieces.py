"""A rank task reads its ops file in pieces (reader.read_process's ``piece``, reader.record_pieces) and never
holds its records whole (issue 31: report memory per op at 1 rank): what it reads, checks and gathers equals the
file read as one piece, bit for bit, with unreadable records, a torn tail and pieces of a few records; a file
with a record not final (de-duplication needs them all) is read as one piece."""
import json
import os
import tracemalloc

import numpy as np
import pytest

import commtrace.analysis.partitioned as partitioned
from commtrace.analysis.partitioned import rank_map
from commtrace.analysis.partitioned.plan import ChunkIndex, chunk_runs
from commtrace.analysis.partitioned.rank_ops import rank_ops
from commtrace.trace import reader, records, schema

from synthetic import write_synthetic_run


def _run(tmp_path, name: str, ops: int = 3000) -> tuple[str, str]:
    run = write_synthetic_run(str(tmp_path / name), ranks=1, ops_per_rank=ops)
    meta = [os.path.join(run, f) for f in os.listdir(run) if f.endswith(schema.META_SUFFIX)][0]
    return run, meta


def _damage(meta: str, status: int | None = None) -> None:
    """Unreadable records (a status no writer writes, seq 0) in several pieces, a torn last record; ``status``:
    one record's status replaced (e.g. in flight)."""
    ops = meta[: -len(schema.META_SUFFIX)] + schema.OPS_SUFFIX
    rec = np.fromfile(ops, schema.OP_RECORD)
    rec["status"][[5, 6, 700]] = 99
    rec["seq"][[40, 2000]] = 0
    if status is not None:
        rec["status"][1234] = status
    with open(ops, "wb") as f:
        f.write(rec.tobytes() + b"\x01\x02\x03")


def _read(meta: str, piece: int):
    issues: list = []
    pt = reader.read_process(meta, issues, piece=piece)
    held = pt.records is not None
    summary = {k: v for k, v in pt.summary().items()}
    ops = rank_ops([pt], {pt.world_id: pt}, 0, 7)      # lean: its end computed 7 ops at a time
    cols = {k: getattr(ops.arrays, k) for k in ("start", "end", "nbytes")}
    cols.update(cell=ops.cell, status=ops.status, mkey=ops.mkey, dret=ops.offsets[0] if ops.offsets else None,
                in_place=ops.waits.in_place, grad=ops.waits.grad)
    return held, summary, [str(i) for i in issues], ops.cells, ops.op_names, ops.mkeys, cols


def _same(a, b) -> None:
    assert a[1:6] == b[1:6]
    for k, v in a[6].items():
        w = b[6][k]
        assert (v is None) == (w is None), k
        if v is not None:
            assert v.dtype == w.dtype and np.array_equal(v, w, equal_nan=v.dtype.kind == "f"), k


def test_pieces_equal_one_piece_with_damage(tmp_path):
    _, meta = _run(tmp_path, "run")
    _damage(meta)
    whole = _read(meta, 0)
    assert whole[0] and whole[1]["lost_records"] == 5 and whole[1]["damage"]
    for piece in (1, 7, 64, 2999, 3000, 1 << 20):       # ops across piece boundaries; one piece; more than the file
        pieces = _read(meta, piece)
        assert not pieces[0], piece                     # not held: record_pieces reads them again
        _same(pieces, whole)


def test_a_record_not_final_reads_the_file_as_one_piece(tmp_path):
    _, meta = _run(tmp_path, "run")
    _damage(meta, schema.STATUS_IN_FLIGHT)
    whole, pieces = _read(meta, 0), _read(meta, 7)
    assert pieces[0] and whole[1]["records"] == pieces[1]["records"] == 2995
    _same(pieces, whole)


def test_rank_task_never_holds_its_records(tmp_path):
    """Traced peak (B per op) of the span table's build and of the op columns' gathering at 1 x 200,000 ops:
    85 and 80 with the records held whole (the base), 53 and 57 read in pieces."""
    run, _ = _run(tmp_path, "big", 200_000)
    partitioned.analyse(_run(tmp_path, "warm", 1000)[0], progress=False)
    peaks: dict = {}

    def traced(mod, name):
        f = getattr(mod, name)

        def g(*a, **k):
            tracemalloc.reset_peak()
            out = f(*a, **k)
            peaks[name] = tracemalloc.get_traced_memory()[1]
            return out
        return g

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reader, "build_mark_tables", traced(reader, "build_mark_tables"))
        mp.setattr(rank_map, "rank_ops_of", traced(rank_map, "rank_ops_of"))
        tracemalloc.start()
        try:
            report = partitioned.analyse(run, progress=False)
        finally:
            tracemalloc.stop()
    assert report.ops == 200_000
    assert {k: v / report.ops <= 62 for k, v in peaks.items()} == {"build_mark_tables": True, "rank_ops_of": True}, \
        {k: v / report.ops for k, v in peaks.items()}


CHUNK = 7   # seq values per chunk: many keys, each over several pieces


def _bounded(meta: str) -> None:
    """The process made a bounded one (``--keep-last``): its records in a ring's two segments, the current one torn."""
    lines = open(meta).read().splitlines()
    header = json.loads(lines[0])
    header["bounded"] = {"keep_last": 1500}
    open(meta, "w").write("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    ops = meta[: -len(schema.META_SUFFIX)] + schema.OPS_SUFFIX
    rec = np.fromfile(ops, schema.OP_RECORD)
    rec[:1000].tofile(ops + ".1")
    with open(ops, "wb") as f:
        f.write(rec[1000:].tobytes() + b"\x01")


def _one_pass(meta: str, piece: int):
    """The rank task's read: checked and indexed in one pass (read_process's ``each`` feeding a ChunkIndex)."""
    issues: list = []
    index = ChunkIndex(CHUNK)
    pt = reader.read_process(meta, issues, piece=piece, each=index.each(meta))
    return [k.tolist() for k in index.of(pt)], pt.summary(), [str(i) for i in issues]


def _separate(meta: str, piece: int):
    """The same read as before: checked, then indexed from the ops file read again whole (every record, a torn
    tail left out) or, bounded, from the records the reader keeps."""
    issues: list = []
    pt = reader.read_process(meta, issues, piece=piece)
    if pt.coverage is not None:
        rec = pt.records
    elif os.path.exists(pt.ops_path):
        rec = np.fromfile(pt.ops_path, schema.OP_RECORD, count=os.path.getsize(pt.ops_path) // schema.RECORD_SIZE)
    else:
        rec = np.empty(0, schema.OP_RECORD)
    return [k.tolist() for k in chunk_runs(rec["group"], rec["seq"], CHUNK)], pt.summary(), [str(i) for i in issues]


@pytest.mark.parametrize("case", ["damaged", "not_final", "bounded", "no_ops_file"])
def test_one_pass_checks_and_indexes_as_the_separate_reads(tmp_path, case):
    """The chunk index and the check (damage, lost records, count, last call, issues) of one pass equal those of
    the separate reads, whatever the pieces: torn, damaged, a record not final (read again whole), a ring."""
    _, meta = _run(tmp_path, "run")
    _damage(meta, schema.STATUS_IN_FLIGHT if case == "not_final" else None)
    if case == "bounded":
        _bounded(meta)
    if case == "no_ops_file":
        os.remove(meta[: -len(schema.META_SUFFIX)] + schema.OPS_SUFFIX)
    for piece in (1, 7, 1 << 16):
        one, apart = _one_pass(meta, piece), _separate(meta, piece)
        assert one == apart, (case, piece)
        assert len(one[0][0]) > 100 or case == "no_ops_file", len(one[0][0])
    assert one[1]["damage"] and (one[1]["lost_records"] == 5 or case == "no_ops_file")


@pytest.mark.parametrize("damaged", [False, True])
def test_rank_task_reads_its_ops_file_twice(tmp_path, monkeypatch, damaged):
    """map_rank reads a plain ops file once to check and index it, once to gather its ops (it read it three
    times: the chunk index was a read of its own); the gather checks the records again only where the check
    found some unreadable."""
    run, meta = _run(tmp_path, "run")
    if damaged:
        _damage(meta)
    plan = partitioned.plan_run(run)
    read, checked = [], []

    def counted(f, calls):
        def g(*a):
            out = f(*a)
            calls.append(len(out))
            return out
        return g
    monkeypatch.setattr(records, "read_slice", counted(records.read_slice, read))
    monkeypatch.setattr(reader, "valid", counted(reader.valid, checked))
    part = rank_map.map_rank(rank_map.RankTask(0, plan.ranks[0], plan.refs, True, CHUNK, piece=700))
    assert sum(read) == 2 * 3000 and sum(checked) == (3000 if damaged else 0)
    assert part.ops == 3000 - 5 * damaged and bool(part.issues) == damaged
    assert len(part.index[meta[: -len(schema.META_SUFFIX)] + schema.OPS_SUFFIX][0]) > 100
