"""Every launcher names the run directory the same way, and `commtrace run` says where it is."""
from __future__ import annotations

import os
import re

import helpers as h
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
