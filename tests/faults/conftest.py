"""Helpers for the fault tests: run a traced multi-process job with a hard timeout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
ROOT = HERE.parent.parent
MPIRUN = Path(sys.executable).parent / "mpirun"

sys.path.insert(0, str(HERE.parent))
from helpers import assert_same_findings, commtrace_main, free_port, partitioned_findings  # noqa: E402,F401


def _env() -> dict:
    e = dict(os.environ)
    for k in ("COMMTRACE_DIR", "COMMTRACE_RUN_ID", "COMMTRACE_LAUNCHER", "COMMTRACE_HANG_TIMEOUT",
              "COMMTRACE_ABORT_ON_HANG"):
        e.pop(k, None)
    e.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", OMPI_ALLOW_RUN_AS_ROOT="1",
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
             PYTHONPATH=str(ROOT) + os.pathsep + e.get("PYTHONPATH", ""),
             MASTER_PORT=str(free_port()))   # a launch's rendezvous (commtrace run keeps it under mpirun)
    return e


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, env=_env(), cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as ex:
        err = ex.stderr.decode(errors="replace") if isinstance(ex.stderr, bytes) else (ex.stderr or "")
        pytest.fail(f"{' '.join(cmd)} still running after {timeout}s\n--- stderr\n{err[-4000:]}")


def traced_spawn(out: Path, mode: str, *args, hang_timeout: float | None = None, timeout: float = 60,
                 script: str = "spawn_faults.py"):
    """``commtrace run [--hang-timeout T --abort-on-hang] -o OUT SCRIPT MODE ARGS`` (a script of scripts/)."""
    cmd = [sys.executable, "-m", "commtrace", "run", "-o", str(out)]
    if hang_timeout:
        cmd += ["--hang-timeout", str(hang_timeout), "--abort-on-hang"]
    cmd += [str(SCRIPTS / script), mode, *map(str, args)]
    return _run(cmd, timeout)


def traced_mpirun(out: Path, mode: str, n: int = 2, timeout: float = 60):
    """``mpirun -n N python -m commtrace run -o OUT mpi_faults.py MODE``."""
    if not MPIRUN.exists():
        pytest.skip("no mpirun in the venv")
    cmd = [str(MPIRUN), "--oversubscribe", "-n", str(n), sys.executable, "-m", "commtrace", "run",
           "-o", str(out), str(SCRIPTS / "mpi_faults.py"), mode]
    return _run(cmd, timeout)


def check_cli(run_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`commtrace check` through the real command line: where its exit code and streams are
    the subject (test_faults.py: 0 on a clean run, 1 on a failed one, 2 on unusable input)."""
    return _run([sys.executable, "-m", "commtrace", "check", str(run_dir), *args], timeout)


def check_main(run_dir: Path, *args: str):
    """`commtrace check` by the command line's main in this process (its returncode, stdout,
    stderr): for tests that read what check says of a run (a subprocess is an interpreter
    importing pandas, ~1 s of CPU); check_cli keeps the real command line tested."""
    return commtrace_main("check", run_dir, *args)


def diagnose_dir(run_dir: Path):
    """The loaded run and its findings (``check.diagnose``) -- asserting that the check
    engine gives the same findings on this run: in one chunk (as `commtrace check` does a
    run this small) and seq chunk by seq chunk (serial)."""
    from commtrace.analysis.check import diagnose
    from commtrace.analysis.partitioned.check_map import check_run
    from commtrace.trace.reader import load_run
    run = load_run(str(run_dir))
    findings = diagnose(run)
    whole = check_run(str(run_dir), progress=False)
    assert whole.chunks <= 1
    assert_same_findings(findings, whole.findings)
    assert_same_findings(findings, partitioned_findings(run_dir, workers=1))
    return run, findings


def kinds(findings) -> dict:
    out: dict = {}
    for f in findings:
        out.setdefault(f.kind, []).append(f)
    return out


def findings_text(findings, width: int = 120, verbose: bool = False) -> str:
    """`commtrace check`'s terminal report of ``findings`` as plain text."""
    import io
    from rich.console import Console
    from commtrace.render.check_text import render_findings
    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, no_color=True, highlight=False, emoji=False,
                  force_terminal=False)
    render_findings(findings, con, verbose=verbose)
    return buf.getvalue()
