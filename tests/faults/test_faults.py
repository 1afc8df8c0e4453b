"""Real multi-process fault runs (gloo, 2 ranks): inject a fault, then `commtrace check`
must name the op, the sequence number and the ranks, and the other rank's trace
must be intact. Every run has a hard timeout so nothing can hang CI.

Fault step: rank 1 misbehaves at step 3, so group seq 1..3 completed everywhere
and seq 4 is the collective that goes wrong (the skip case hangs at seq 6).
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from commtrace.analysis import check as C

from .conftest import SCRIPTS, check_cli, check_main, commtrace_main, diagnose_dir, kinds, traced_mpirun, traced_spawn

SCRIPT = "spawn_faults.py"


def _completed_seqs(run, rank):
    f = run.frame
    sel = f[(f["rank"] == rank) & (f["status"].astype(str) == "completed")]
    return sorted(int(s) for s in sel["seq"])


def _proc(run, rank):
    return next(p for p in run.processes if p["rank"] == rank)


def _assert_not_arrived(findings, seq, entered, missing, op="all_reduce"):
    na = kinds(findings).get(C.NOT_ARRIVED, [])
    assert na, [f.title for f in findings]
    f = na[0]
    assert (f.seq, f.op, f.group) == (seq, op, "0"), f.title
    assert f.data["entered"] == entered and f.data["missing"] == missing, f.data
    assert f"seq {seq}" in f.title and op in f.title
    # the missing rank's last call site is named
    assert SCRIPT in (f.data["last_callsite"][str(missing[0])] or "") or "mpi_faults.py" in \
        (f.data["last_callsite"][str(missing[0])] or "")
    return f


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """A run without faults (rank 0 sends itself SIGUSR1 once: dump and continue)."""
    out = tmp_path_factory.mktemp("clean") / "run"
    p = traced_spawn(out, "usr1")
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_clean_run_is_clean_and_sigusr1_dumps(clean_run):
    p = check_cli(clean_run)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no problems found" in p.stdout
    assert "last seq completed: rank 0-1: 6" in p.stdout  # both ranks at 6: one range
    dumps = [n for n in os.listdir(clean_run) if n.startswith("sigusr1.rank0.")]
    assert len(dumps) == 1
    doc = json.load(open(clean_run / dumps[0]))
    assert doc["reason"] == "SIGUSR1" and doc["rank"] == 0
    main = next(t for t in doc["threads"] if t["name"] == "MainThread")
    assert any(fr["file"].endswith(SCRIPT) for fr in main["frames"])
    assert any(t["name"] == "commtrace-flush" for t in doc["threads"])
    run, findings = diagnose_dir(clean_run)
    assert [d["reason"] for d in _proc(run, 0)["dumps"]] == ["SIGUSR1"]
    assert C.exit_code(findings) == 0


def test_rank_raises(tmp_path):
    p = traced_spawn(tmp_path / "run", "raise", hang_timeout=5)
    assert p.returncode != 0
    run, findings = diagnose_dir(tmp_path / "run")
    f = _assert_not_arrived(findings, 4, [0], [1])
    assert "raised RuntimeError: injected failure at step 3" in "\n".join(f.details)
    exc = [x for x in kinds(findings)[C.EXCEPTION] if x.ranks == [1]]
    assert exc and exc[0].data["exc_type"] == "RuntimeError"
    assert "injected failure" in exc[0].data["message"]
    # rank 0's trace is intact: seq 1..3 completed, seq 4 recorded (failed or in flight)
    assert _completed_seqs(run, 0)[:3] == [1, 2, 3]
    assert _completed_seqs(run, 1) == [1, 2, 3]
    assert _proc(run, 0)["complete"]
    # root cause first: rank 1's exception, then the collective it left rank 0 in, then the consequences
    errors = [x for x in findings if x.severity == C.ERROR]
    assert (errors[0].kind, errors[0].ranks, errors[1].kind) == (C.EXCEPTION, [1], C.NOT_ARRIVED), \
        [x.title for x in errors]
    p = check_cli(tmp_path / "run")
    assert p.returncode == 1
    assert p.stdout.splitlines()[2] == "ERROR rank 1 raised RuntimeError: injected failure at step 3", p.stdout
    # the report says it too: the banner's "ended" row and --json's "endings" (rank 0 ended otherwise)
    rep = commtrace_main("report", "--json", "-", tmp_path / "run")
    assert rep.returncode == 0, rep.stderr
    endings = json.loads(rep.stdout)["run"]["endings"]
    assert endings["1"] == "raised RuntimeError: injected failure at step 3" and "0" in endings, endings
    rep = commtrace_main("report", tmp_path / "run")
    banner = rep.stdout.split("\n  hosts ")[0]       # the row folds at 80 columns
    assert "\n  ended      rank 0: " in banner, rep.stdout   # raised gloo's error, or SIGTERMed by mp.spawn
    assert "; rank 1: raised RuntimeError: injected failure at step 3" in " ".join(banner.split()), rep.stdout


def test_rank_sigkilled(tmp_path):
    p = traced_spawn(tmp_path / "run", "sigkill", hang_timeout=5)
    assert p.returncode != 0
    run, findings = diagnose_dir(tmp_path / "run")
    f = _assert_not_arrived(findings, 4, [0], [1])
    assert "trace ends abruptly" in "\n".join(f.details)
    abrupt = kinds(findings)[C.ABRUPT]
    # Rank 0 is torn down too (SIGTERM from mp.spawn, or gloo aborting the process
    # when its peer vanishes -- then its trace rightly ends abruptly as well).
    assert [1] in [x.ranks for x in abrupt] and all(x.ranks in ([0], [1]) for x in abrupt)
    # nothing that completed > 1 s before the SIGKILL is lost, on either rank
    assert _completed_seqs(run, 1) == [1, 2, 3]
    assert not _proc(run, 1)["complete"]
    assert _completed_seqs(run, 0) == [1, 2, 3]
    end0 = _proc(run, 0)["end"] or {}
    if end0.get("how") == "signal":  # torn down by mp.spawn while blocked in C++: still dumped
        assert [d["reason"] for d in _proc(run, 0)["dumps"]] == ["SIGTERM"]


def test_rank_skips_all_reduce_hang_watchdog(tmp_path):
    p = traced_spawn(tmp_path / "run", "skip", hang_timeout=2, timeout=60)
    assert p.returncode != 0
    assert "hang" in p.stderr and "dumped to" in p.stderr
    run, findings = diagnose_dir(tmp_path / "run")
    # rank 1 skipped one all_reduce: rank 0's 6th call (seq 6) waits forever
    f = _assert_not_arrived(findings, 6, [0], [1])
    assert f.data["waiting"] == [0]
    # where rank 1 was instead: its SIGTERM dump's innermost frame of the script
    line = next(i for i, t in enumerate(open(SCRIPTS / SCRIPT), 1) if "time.sleep(120)" in t)
    assert f.data["dumped_at"] == {"1": f"{SCRIPT}:{line} time.sleep(120) (SIGTERM dump)"}
    assert f"rank 1 was at {SCRIPT}:{line} time.sleep(120) (SIGTERM dump)" in f.details
    end0 = _proc(run, 0)["end"]
    assert end0["how"] == "hang" and end0["exit_code"] == 3
    hang = [d for d in _proc(run, 0)["dumps"] if d["reason"] == "hang"]
    assert len(hang) == 1  # once per episode
    doc = json.load(open(tmp_path / "run" / hang[0]["path"]))
    assert doc["in_flight"][0]["op"] == "all_reduce" and doc["in_flight"][0]["seq"] == 6
    assert doc["in_flight"][0]["shapes"] == [[16]] and doc["in_flight"][0]["age_s"] >= 2
    main = next(t for t in doc["threads"] if t["name"] == "MainThread")
    assert any(fr["file"].endswith(SCRIPT) for fr in main["frames"])
    # rank 1 was torn down by SIGTERM and dumped too; its trace is complete
    assert _proc(run, 1)["complete"] and _proc(run, 1)["end"]["how"] == "signal"
    assert [d["reason"] for d in _proc(run, 1)["dumps"]] == ["SIGTERM"]
    assert _completed_seqs(run, 1) == [1, 2, 3, 4, 5]


def _fatal_handler_built() -> bool:
    from commtrace import native
    from commtrace.capture.native_ext import FATAL_SIGNALS
    if native.mode() == "off":
        return False
    try:
        native.build(FATAL_SIGNALS)
    except native.NativeBuildError:
        return False
    return True


def test_ranks_pass_different_sizes(tmp_path):
    """Rank 0 calls the mismatched all_reduce last and gloo aborts it at once (SIGABRT, on its
    worker thread, while the main thread waits in the op): its record and its end are on disk
    (before: lost with the process, less than a flush interval old; check said rank 0 never
    arrived and its trace ended abruptly, as it still does without the extensions)."""
    closes = _fatal_handler_built()
    p = traced_spawn(tmp_path / "run", "sizes", hang_timeout=4)
    assert p.returncode != 0
    run, findings = diagnose_dir(tmp_path / "run")
    titles = [f.title for f in findings]
    assert _completed_seqs(run, 0)[:3] == [1, 2, 3] and _completed_seqs(run, 1)[:3] == [1, 2, 3]
    if not closes:  # COMMTRACE_NATIVE=0, no compiler: check still points at seq 4 and rank 0
        _assert_not_arrived(findings, 4, [1], [0])
        assert [x.ranks for x in kinds(findings)[C.ABRUPT]] == [[0]], titles
        return
    mm = kinds(findings).get(C.MISMATCH, [])
    assert mm, titles
    f = mm[0]
    assert (f.seq, f.op, f.severity) == (4, "all_reduce", C.ERROR)
    assert f.data["categories"]["sizes"] == {"[[16]]": [0], "[[32]]": [1]}
    end = _proc(run, 0)["end"]
    assert (end["how"], end["exit_code"]) == ("signal", 128 + 6), end
    assert "rank 0 terminated by SIGABRT (exit code 134)" in titles, titles
    assert C.NOT_ARRIVED not in kinds(findings) and C.ABRUPT not in kinds(findings), titles


def test_truncated_trace(clean_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(clean_run, run_dir)
    ops = next(run_dir.glob("rank1.pid*.ops.bin"))
    size = os.path.getsize(ops)
    os.truncate(ops, size - 32 - 7)  # lose the last record and tear the one before it
    run, findings = diagnose_dir(run_dir)
    abrupt = kinds(findings)[C.ABRUPT]
    assert [x.ranks for x in abrupt] == [[1]]
    assert "truncated" in abrupt[0].title
    na = kinds(findings)[C.NOT_ARRIVED][0]
    assert na.ranks == [1] and na.seq == 5
    assert "truncated" in "\n".join(na.details)
    assert _completed_seqs(run, 0) == [1, 2, 3, 4, 5, 6] and _proc(run, 0)["complete"]
    p = check_main(run_dir)
    assert p.returncode == 1 and "truncated" in p.stdout


@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_mpirun_aborts_job(tmp_path, mode):
    p = traced_mpirun(tmp_path / "run", mode)
    assert p.returncode != 0
    run, findings = diagnose_dir(tmp_path / "run")
    f = _assert_not_arrived(findings, 4, [0], [1])
    details = "\n".join(f.details)
    if mode == "exit":  # os._exit closes the trace first: every op on disk, and the exit code
        assert "exited with code 7" in details
        assert _proc(run, 1)["complete"] and _proc(run, 1)["end"]["exit_code"] == 7
    else:
        assert "raised RuntimeError: injected failure at step 3 (mpi)" in details
        assert _proc(run, 1)["complete"]
    assert _completed_seqs(run, 1) == [1, 2, 3]
    assert _completed_seqs(run, 0) == [1, 2, 3]
    assert _proc(run, 0)["complete"] or _proc(run, 0)["end"] is None


def test_check_exit_code_2_on_unusable_input(tmp_path):
    assert check_cli(tmp_path / "nope").returncode == 2
    (tmp_path / "empty").mkdir()
    p = check_cli(tmp_path / "empty")
    assert p.returncode == 2 and p.stderr.startswith("commtrace: error:")
