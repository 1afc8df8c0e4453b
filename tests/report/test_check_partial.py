"""``commtrace check`` (check_map.check_run) gives ``check.diagnose``'s findings on the loaded
run, finding for finding: in one chunk (a run that fits), seq chunk by seq chunk serial, in
a process pool and on a real Dask LocalCluster, on synthetic runs with faults written into
their files (the fault tests in tests/faults compare every real run they diagnose the same way)."""
import glob
import json
import os
import shutil
import sys

import numpy as np
import pytest

from commtrace.analysis.check import diagnose
from commtrace.analysis.partitioned.check_map import check_run
from commtrace.cli import main as cli_main
from commtrace.errors import CommtraceError
from commtrace.trace import schema
from commtrace.trace.reader import load_run
from synthetic import write_synthetic_run

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from helpers import assert_same_findings  # noqa: E402


def _ops_file(run_dir, rank):
    return glob.glob(os.path.join(run_dir, f"rank{rank}.*{schema.OPS_SUFFIX}"))[0]


def _edit(run_dir, rank, fn):
    """Rewrite one rank's op records with ``fn(records, {op: [sig ids]})``."""
    path = _ops_file(run_dir, rank)
    with open(path.replace(schema.OPS_SUFFIX, schema.META_SUFFIX)) as f:
        sigs = [obj for obj in map(json.loads, f) if obj.get("type") == schema.META_SIG]
    by_op: dict = {}
    for s in sigs:
        by_op.setdefault(s["op"], []).append(s["id"])
    rec = np.fromfile(path, dtype=schema.OP_RECORD)
    fn(rec, by_op)
    rec.tofile(path)


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    """8 ranks, p2p ring, rank 5 slow (a straggler), and written-in faults spread over
    the seq range: rank 2 stuck in flight, rank 4 calling another op at 12 seqs (a
    mismatch, more than the 5 shown), rank 1 failing at 3 seqs, rank 6 with unreadable
    records mid-file (lost records), rank 7 receiving one message under another seq (two unmatched p2p)."""
    d = write_synthetic_run(str(tmp_path_factory.mktemp("check") / "run"), ranks=8, ops_per_rank=2000, seed=3,
                            p2p=True, slow_rank=5, slow_ns=2e8)

    def coll_rows(rec, by_op):
        return np.flatnonzero(np.isin(rec["sig"], by_op["all_reduce"]) & (rec["group"] == 0))

    def stuck(rec, by_op):
        rec["status"][coll_rows(rec, by_op)[1250]] = schema.STATUS_IN_FLIGHT

    def mismatch(rec, by_op):
        other = [i for op, ids in sorted(by_op.items()) if op not in ("all_reduce", "send", "recv") for i in ids][0]
        rec["sig"][coll_rows(rec, by_op)[100:1300:100]] = other

    def failed(rec, by_op):
        rec["status"][coll_rows(rec, by_op)[[700, 900, 1100]]] = schema.STATUS_FAILED

    def lost(rec, by_op):
        rec["seq"][coll_rows(rec, by_op)[450:454]] = 0

    def unmatched(rec, by_op):
        rec["seq"][np.flatnonzero(np.isin(rec["sig"], by_op["recv"]))[10]] += 100_000

    for rank, fn in ((2, stuck), (4, mismatch), (1, failed), (6, lost), (7, unmatched)):
        _edit(d, rank, fn)
    return d


@pytest.fixture(scope="module")
def faulty_findings(faulty_run):
    findings = diagnose(load_run(faulty_run))
    kinds = {f.kind for f in findings}
    # The run exercises every diagnosis over ops (else the equality below would prove little).
    assert {"stuck", "mismatch", "failed", "lost_record", "straggler", "p2p_unmatched", "progress"} <= kinds, kinds
    assert any("more mismatched sequence numbers" in f.title for f in findings)
    return findings


@pytest.mark.parametrize("workers", [1, 2])
def test_partitioned_check_equals_one_frame(faulty_run, faulty_findings, workers):
    # A small memory limit: many seq chunks, so every group is split.
    s = check_run(faulty_run, workers=workers, memory_limit=64 << 20, progress=False, partitioned=True)
    assert s.chunks > 4 and s.ops == len(load_run(faulty_run).frame)
    assert s.executor == ("serial" if workers == 1 else "processes")
    assert_same_findings(faulty_findings, s.findings)


def test_run_that_fits_is_one_chunk_in_this_process(faulty_run, faulty_findings):
    s = check_run(faulty_run, progress=False)
    assert (s.chunks, s.executor, s.workers) == (1, "serial", 1)
    assert s.ops == len(load_run(faulty_run).frame)
    assert_same_findings(faulty_findings, s.findings)
    # A memory limit the run does not fit in (16,000 ops at CHUNK_BYTES_PER_OP) cuts it into seq chunks.
    assert check_run(faulty_run, workers=1, memory_limit=4 << 20, progress=False).chunks > 1


def test_partitioned_check_on_dask_local_cluster(faulty_run, faulty_findings):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  ) as cluster, distributed.Client(cluster) as client:
        s = check_run(faulty_run, dask=client, memory_limit=64 << 20, progress=False)
        by_address = check_run(faulty_run, dask=cluster.scheduler_address, progress=False)
    assert s.executor == "dask" and s.workers == 2
    assert_same_findings(faulty_findings, s.findings)
    assert_same_findings(faulty_findings, by_address.findings)


def test_truncated_rank_file_is_named_on_both_paths(faulty_run, tmp_path):
    """One rank's ops file cut early (mid-record): it never arrived at the next collective."""
    d = str(tmp_path / "run")
    shutil.copytree(faulty_run, d)
    path = _ops_file(d, 3)
    os.truncate(path, 300 * schema.RECORD_SIZE + 7)
    one = diagnose(load_run(d))
    part = check_run(d, workers=1, memory_limit=64 << 20, progress=False, partitioned=True).findings
    assert_same_findings(one, part)
    arrived = [f for f in part if f.kind == "not_arrived"]
    assert arrived and all(f.ranks == [3] for f in arrived)
    assert any(f.kind == "abrupt" and f.ranks == [3] for f in part)


def test_cli_check_partitioned_json_equals_one_frame(faulty_run, capsys):
    assert cli_main(["check", faulty_run, "--json"]) == 1
    one = json.loads(capsys.readouterr().out)
    assert cli_main(["check", faulty_run, "--json", "--partitioned", "--memory-limit", "64M"]) == 1
    part = json.loads(capsys.readouterr().out)
    assert part == one
    # A memory limit the run does not fit in cuts it into seq chunks by itself.
    assert cli_main(["check", faulty_run, "--json", "--memory-limit", "1M"]) == 1
    assert json.loads(capsys.readouterr().out) == one


def test_cli_check_bad_input_is_one_line_exit_2(faulty_run, capsys):
    dask = pytest.importorskip("dask")
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):   # Dask's setting, which --dask honours
        assert cli_main(["check", faulty_run, "--dask", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--dask" in err
    assert cli_main(["check", faulty_run, "--partitioned", "--memory-limit", "lots"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--memory-limit lots" in err


def test_partitioned_check_unusable_input_as_one_frame(tmp_path):
    with pytest.raises(CommtraceError) as one:
        load_run(str(tmp_path))
    with pytest.raises(CommtraceError) as part:
        check_run(str(tmp_path), workers=1, progress=False)
    assert str(part.value) == str(one.value)


def test_partitioned_check_of_a_bounded_run(faulty_run, tmp_path):
    """A ring (--keep-last): records in two segment files, the oldest dropped; the
    collectives a member dropped are not judged, on both paths alike."""
    d = str(tmp_path / "run")
    shutil.copytree(faulty_run, d)
    for meta in glob.glob(os.path.join(d, "*" + schema.META_SUFFIX)):
        lines = open(meta).read().splitlines()
        header = json.loads(lines[0])
        header["bounded"] = {"keep_last": 1500}
        open(meta, "w").write("\n".join([json.dumps(header)] + lines[1:]) + "\n")
        ops = meta.replace(schema.META_SUFFIX, schema.OPS_SUFFIX)
        rec = np.fromfile(ops, dtype=schema.OP_RECORD)
        rec[:1000].tofile(ops + ".1")                       # the ring's previous segment
        rec[1000:].tofile(ops)
    one = diagnose(load_run(d))
    assert any(f.kind == "coverage" for f in one)
    part = check_run(d, workers=2, memory_limit=64 << 20, progress=False, partitioned=True)
    assert part.chunks > 4
    assert_same_findings(one, part.findings)
