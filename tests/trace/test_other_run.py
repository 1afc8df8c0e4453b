"""A run directory that also holds a file of another run (one ``-o DIR`` used twice): the Python API
(``reader.load_run``, then ``check.diagnose``) leaves that file out by default, as ``commtrace check``
and the report do, with an issue naming it."""
from __future__ import annotations

import os
import sys

from commtrace.analysis import check
from commtrace.analysis.partitioned.check_map import check_run
from commtrace.trace import reader
from commtrace.trace.issues import OTHER_RUN

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from helpers import commtrace_main  # noqa: E402
from tracebuilder import Proc, write_run  # noqa: E402


def _run_with_another_runs_file(tmp_path) -> str:
    procs = [Proc(r) for r in range(2)]
    for p in procs:
        for i in range(3):
            p.op("all_reduce", 10 * i + p.rank, 10 * i + 5)
    run = write_run(str(tmp_path / "r"), procs)
    other = Proc(2, world_size=3, pid=9000, world_id="wa")   # a rank of a 3-rank world whose ranks 0-1 never wrote
    other.op("all_reduce", 0, 3)
    other.write(run, 1_000.0, run_id="other")
    return run


def _keys(findings) -> list:
    return sorted((f.severity, f.kind, f.title) for f in findings)


def test_load_run_and_diagnose_leave_another_runs_file_out(tmp_path):
    run_dir = _run_with_another_runs_file(tmp_path)
    run = reader.load_run(run_dir)
    assert sorted(set(run.frame["rank"])) == [0, 1]
    assert [i.kind for i in run.issues if i.kind == OTHER_RUN] == [OTHER_RUN]
    findings = check.diagnose(run)
    assert _keys(findings) == _keys(check_run(run_dir).findings)
    assert not [f for f in findings if f.severity == "error"], [f.title for f in findings]
    cli = commtrace_main("check", run_dir)      # before: "rank 0-1 of world w1: no trace file", exit 1
    assert cli.returncode == 0 and "belongs to run 'other'" in cli.stdout, (cli.stdout, cli.stderr)
    everything = reader.load_run(run_dir, one_run=False)     # asked for: every file, the other run's too
    assert sorted(set(everything.frame["rank"])) == [0, 1, 2]
