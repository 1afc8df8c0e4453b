"""Every failure is reported precisely: one line that names the cause, and the
documented exit code (README "Exit codes" and fault table). Real processes:
mpirun and mp.spawn runs that die before any process group exists, damaged
copies of a real run, and `commtrace run` targets that do not exist.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest

from commtrace.analysis import check as C

from .conftest import MPIRUN, SCRIPTS, _env, _run, check_cli, check_main, commtrace_main, diagnose_dir, kinds

EARLY = str(SCRIPTS / "early_faults.py")


def _error_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("ERROR ")]


def test_rank_dies_before_init_process_group_mpirun(tmp_path):
    if not MPIRUN.exists():
        pytest.skip("no mpirun in the venv")
    run_dir = tmp_path / "run"
    p = _run([str(MPIRUN), "--oversubscribe", "-n", "2", sys.executable, "-m", "commtrace", "run",
              "-o", str(run_dir), EARLY, "keyerror"], timeout=90)
    assert p.returncode != 0
    # both processes left a record although neither ever had a process group
    run, findings = diagnose_dir(run_dir)
    assert run.processes == [] and len(run.unranked) == 2
    assert all(p["launch_env"].get("OMPI_COMM_WORLD_SIZE") == "2" for p in run.unranked)
    c = check_main(run_dir)
    assert c.returncode == 1, c.stdout + c.stderr
    errors = _error_lines(c.stdout)
    assert errors[0] == "ERROR rank 1 raised KeyError: 'lr' before any process group existed", c.stdout
    assert "early_faults.py\", line" in c.stdout and 'lr = CONFIG["lr"]  # KEYERROR' in c.stdout
    # rank 0 was torn down by mpirun while it waited in init_process_group
    assert any(e.startswith("ERROR rank 0 ") and e.endswith("before any process group existed") for e in errors)
    assert C.MISSING_RANK not in kinds(findings)


def test_rank_dies_before_init_process_group_spawn(tmp_path):
    run_dir = tmp_path / "run"
    p = _run([sys.executable, "-m", "commtrace", "run", "-o", str(run_dir), EARLY, "keyerror", "--spawn"],
             timeout=90)
    assert p.returncode == 1
    run, _ = diagnose_dir(run_dir)
    # the parent (runs mp.spawn), both spawned processes (and multiprocessing's resource
    # tracker, another Python child): none of them is a rank
    assert run.processes == []
    spawned = [p for p in run.unranked if p["spawn_index"] is not None]
    assert sorted(p["spawn_index"] for p in spawned) == [0, 1]
    assert {p["ppid"] for p in spawned} <= {p["pid"] for p in run.unranked}
    c = check_main(run_dir)
    assert c.returncode == 1, c.stdout + c.stderr
    errors = _error_lines(c.stdout)
    assert errors[0] == "ERROR mp.spawn process 1 raised KeyError: 'lr' before any process group existed"
    assert "ERROR mp.spawn process 0 terminated by SIGTERM (exit code 143) before any process group existed" \
        in errors or any(e.startswith("ERROR mp.spawn process 0 trace ends abruptly") for e in errors)
    # the parent's own exception (a consequence) is reported, and not as a rank
    parent = [e for e in errors if e.startswith("ERROR pid ")]
    assert len(parent) == 1 and "raised ProcessRaisedException: Process 1 terminated" in parent[0]
    assert "before any process group" not in parent[0]
    # report does not count the rank-less processes as ranks: no rank, nothing to report
    rep = commtrace_main("report", run_dir)
    assert (rep.returncode == 2 and len(rep.stderr.splitlines()) == 1) or "ranks      0 " in rep.stdout, \
        rep.stdout + rep.stderr


@pytest.fixture(scope="module")
def two_site_run(tmp_path_factory):
    """A clean 2-rank run whose odd steps call all_reduce from a second line (two sigs)."""
    out = tmp_path_factory.mktemp("sites") / "run"
    p = _run([sys.executable, "-m", "commtrace", "run", "-o", str(out), str(SCRIPTS / "spawn_faults.py"),
              "sites", "8"], timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    assert check_main(out).returncode == 0
    return out


def test_truncated_metadata_is_named_not_misread(two_site_run, tmp_path):
    """Rank 1's meta file is cut inside the definition of its second sig: the records
    that use it (seq 2, 4, 6, 8) cannot be read, while later ones (seq 7) can. Rank 1
    did arrive at seq 2; the damaged file is the cause, and no diagnosis says otherwise."""
    run_dir = tmp_path / "run"
    shutil.copytree(two_site_run, run_dir)
    meta = next(run_dir.glob("rank1.pid*.meta.jsonl"))
    text = meta.read_bytes()
    os.truncate(meta, text.index(b'{"type":"sig","id":1') + 20)
    c = check_main(run_dir)
    assert c.returncode == 1, c.stdout + c.stderr
    errors = _error_lines(c.stdout)
    assert errors[0] == (f"ERROR group 0 (default_pg) seq 2..8 (4 sequence numbers): the records of rank 1 are "
                         f"unreadable ({meta.name} truncated mid-line; 4 of 8 op records in "
                         f"{meta.name.replace('.meta.jsonl', '.ops.bin')} unreadable)")
    assert f"ERROR rank 1: trace file damaged ({meta.name} truncated mid-line): how the process ended is unknown" \
        in errors
    assert "never arrived" not in c.stdout
    _, findings = diagnose_dir(run_dir)
    assert C.NOT_ARRIVED not in kinds(findings)
    assert kinds(findings)[C.LOST_RECORD][0].data["seqs"] == [2, 4, 6, 8]


def test_corrupt_op_records_are_a_problem(two_site_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_site_run, run_dir)
    ops = next(run_dir.glob("rank0.pid*.ops.bin"))
    rnd = random.Random(16)
    ops.write_bytes(bytes(rnd.getrandbits(8) for _ in range(ops.stat().st_size)))
    c = check_main(run_dir)
    assert c.returncode == 1, c.stdout + c.stderr
    assert "no problems found" not in c.stdout
    assert f"ERROR rank 0: trace damaged: 8 of 8 op records in {ops.name} unreadable" in _error_lines(c.stdout)
    assert "never arrived" not in c.stdout


def test_nothing_readable_is_exit_2(two_site_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_site_run, run_dir)
    for meta in run_dir.glob("*.meta.jsonl"):
        meta.write_bytes(b"\x00garbage\n" * 10)
    c = check_cli(run_dir)
    assert c.returncode == 2
    assert c.stdout == "" and len(c.stderr.splitlines()) == 1
    assert c.stderr.startswith(f"commtrace: error: {run_dir}: no readable trace files")


@pytest.mark.parametrize("target,message", [
    (["-m", "nosuch_mod"], "commtrace: error: run: -m nosuch_mod: no module named 'nosuch_mod'"),
    (["-m", "json.nosuch"], "commtrace: error: run: -m json.nosuch: no module named 'json.nosuch'"),
    (["nosuch_script.py"], "commtrace: error: run: nosuch_script.py: no such file"),
])
def test_run_target_that_does_not_exist(tmp_path, target, message):
    p = _run([sys.executable, "-m", "commtrace", "run", "-o", str(tmp_path / "run"), *target], timeout=60)
    assert (p.returncode, p.stderr.strip(), p.stdout) == (2, message, "")


def test_run_target_that_is_a_program(tmp_path):
    """A launcher named where the script goes (commtrace run mpirun ...): one line that says
    what to do instead, and nothing runs."""
    env = _env()
    env["PATH"] = str(MPIRUN.parent) + os.pathsep + env.get("PATH", "")
    p = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", str(tmp_path / "run"), "mpirun", "-n", "2",
                        "x.py"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == ("commtrace: error: run: mpirun is a program, not a Python script: start commtrace "
                                "under it (e.g. mpirun ... python -m commtrace run SCRIPT)")
    assert not (tmp_path / "run").exists()


def _which_python(tmp_path, name: str) -> dict:
    """An environment whose PATH finds ``name``: this python's own directory first, or (``name``
    "other/python3") a link to this interpreter in another directory, as another venv's python is."""
    env = _env()
    if name.startswith("other/"):
        (tmp_path / "other").mkdir()
        os.symlink(sys.executable, tmp_path / name)
        env["PATH"] = str(tmp_path / "other") + os.pathsep + env.get("PATH", "")
    else:
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


@pytest.mark.parametrize("how", ["script", "module"])
def test_run_python_script_drops_this_python(tmp_path, how):
    """`commtrace run python train.py` (a profiler's command line) runs train.py traced: the python
    running commtrace is dropped from the command, and `python -m MODULE` is -m MODULE."""
    script = tmp_path / "hello.py"
    script.write_text("import sys\nprint('hello', sys.argv[1:])\n")
    target = [str(script), "a", "b"] if how == "script" else ["-m", "hello", "a", "b"]
    p = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", str(tmp_path / "run"),
                        os.path.basename(sys.executable), *target], env=_which_python(tmp_path, "python"),
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == "hello ['a', 'b']\n", p.stderr
    assert any(n.endswith(".meta.jsonl") for n in os.listdir(tmp_path / "run")), os.listdir(tmp_path / "run")


@pytest.mark.parametrize("target,message", [
    (["python", "-u", "x.py"], "run: python's own option -u is not taken here; give it to the python that runs "
                               "commtrace (python -u -m commtrace run SCRIPT)"),
    (["other/python3", "x.py"], "run: {path} is another Python than the one running commtrace ({exe}): start "
                                "commtrace with it ({path} -m commtrace run SCRIPT)"),
    (["sh-script", "x.py"], "run: {path} is a program, not a Python script: start commtrace under it (e.g. "
                            "{path} ... python -m commtrace run SCRIPT)"),
])
def test_run_python_that_cannot_be_dropped(tmp_path, target, message):
    """Python's own options, another interpreter (another venv's python: a link to the same binary
    elsewhere) and a program given by its path are one line each, and nothing runs."""
    env = _which_python(tmp_path, target[0] if target[0].startswith("other/") else "python")
    path = str(tmp_path / target[0])
    if target[0] == "python":
        target[0] = os.path.basename(sys.executable)
        message = message.replace("(python -u", f"({target[0]} -u")
    else:
        target[0] = path
        if target[0].endswith("sh-script"):
            (tmp_path / "sh-script").write_text("#!/bin/sh\necho no\n")
    p = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", str(tmp_path / "run"), *target], env=env,
                       capture_output=True, text=True, timeout=60)
    want = "commtrace: error: " + message.format(path=path, exe=sys.executable)
    assert (p.returncode, p.stdout, p.stderr.strip()) == (2, "", want)
    assert not (tmp_path / "run").exists()
