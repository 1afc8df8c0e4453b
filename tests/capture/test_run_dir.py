"""Every launcher names the run directory the same way, and `commtrace run` says where it is."""
from __future__ import annotations

import os
import re

import helpers as h
from commtrace.trace.schema import RECORD_SIZE
from helpers import worker

NAME = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


def _check(res, cwd):
    res.check()
    runs = [d for d in os.listdir(cwd / "commtrace-out") if not d.startswith(".")]
    assert len(runs) == 1 and NAME.match(runs[0]), runs           # one directory, every rank in it
    files = os.listdir(cwd / "commtrace-out" / runs[0])
    assert sum(f.startswith("rank0.") and f.endswith(".meta.jsonl") for f in files) == 1
    assert sum(f.startswith("rank1.") and f.endswith(".meta.jsonl") for f in files) == 1
    where = os.path.join("commtrace-out", runs[0])
    lines = [line for line in res.stderr.splitlines() if line.startswith("commtrace: trace written to")]
    assert lines == [f"commtrace: trace written to {where} (commtrace report {where})"], res.stderr


def test_mpirun(tmp_path):
    res = h.run(h.mpirun_cmd(2, h.PY, "-m", "commtrace", "run", worker("trun.py"), tmp_path / "o"),
                env=h.mpi_env(), cwd=tmp_path)
    _check(res, tmp_path)


def test_torchrun(tmp_path):
    res = h.run([h.TORCHRUN, "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                 "--master_port", h.free_port(), "-m", "commtrace", "run", worker("trun.py"), tmp_path / "o"],
                cwd=tmp_path)
    _check(res, tmp_path)


def test_script_spawning_its_ranks(tmp_path):
    script = os.path.join(h.REPO, "tests", "report", "spawn_ddp.py")
    res = h.run([h.PY, "-m", "commtrace", "run", script, h.free_port()], cwd=tmp_path)
    _check(res, tmp_path)


def test_interrupted_mpirun_names_its_trace(tmp_path):
    """Ctrl-C to mpirun: it SIGTERMs the ranks and drops what they print from then on, so rank 0
    names the trace when it starts; the trace is there, every rank's, with its SIGTERM dump."""
    import signal
    import time

    def all_reduces_on_disk() -> int:
        out = tmp_path / "commtrace-out"
        runs = os.listdir(out) if out.is_dir() else []
        return sum(f.endswith(".ops.bin") and os.path.getsize(out / runs[0] / f) >= RECORD_SIZE
                   for f in (os.listdir(out / runs[0]) if runs else []))

    def interrupt_when_ready(proc):
        # Both ranks' all_reduce done and flushed (a fixed 2 s after their ops files existed
        # could interrupt a loaded machine's rank before its all_reduce)
        deadline = time.monotonic() + 90
        while all_reduces_on_disk() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)     # what a terminal's Ctrl-C sends mpirun's process group

    res = h.run(h.mpirun_cmd(2, h.PY, "-m", "commtrace", "run", worker("wait_for_sigint.py")),
                env=h.mpi_env(), cwd=tmp_path, timeout=120, after_start=interrupt_when_ready)
    assert not res.timed_out and res.returncode != 0, res.stderr
    runs = os.listdir(tmp_path / "commtrace-out")
    where = os.path.join("commtrace-out", runs[0])
    assert f"commtrace: tracing to {where} (commtrace report {where})" in res.stderr.splitlines(), res.stderr
    files = os.listdir(tmp_path / where)
    assert {f.split(".")[0] for f in files if f.endswith(".meta.jsonl")} == {"rank0", "rank1"}
    df = h.load(tmp_path / where)
    assert df["op"].tolist() == ["all_reduce"] * 2
