"""The mpi backend's C++ fast path (commtrace/mpi/native_mpi.cpp) under mpirun.

The extension is built here if it is not yet (``commtrace build-native`` does it
in ``make setup``; ~25 s; conftest's ``built`` fixture). Every test skips, saying why, when it cannot be built for
the MPI that mpi4py uses (no compiler wrapper or headers for it, no C++
compiler, another torch).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NATIVE = {"COMMTRACE_NATIVE": "1"}
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not (Path(sys.executable).parent / "mpirun").exists(),
    reason="needs mpi4py and mpirun next to sys.executable")


# On 2 ranks the fast path's untraced workers share one launch (conftest.run_mpi_shared: the
# launch is not what they test); on 3 ranks worker_native's ops are the launch.
SHARED_2 = [["worker_native.py", "ops", "ddp"], ["worker_mixed.py", "ops", "join"], ["worker_profiler.py"]]


def _native(run_mpi_shared, run_mpi_once, n: int, mode: str) -> str:
    """worker_native.py's summary line of ``mode`` on ``n`` ranks."""
    if n == 2:
        out = run_mpi_shared(2, SHARED_2, "worker_native.py", env=NATIVE)
    else:
        out = run_mpi_once("worker_native.py", n, mode, env=NATIVE, timeout=180)
    lines = [line for line in out.splitlines() if line.startswith(f"native {mode}: ")]
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("n", [2, 3])
def test_fast_path_matches_python_backend_and_gloo(built, run_mpi_shared, run_mpi_once, n):
    # every fast-path dtype x op, the delegated cases (AVG, float16, bfloat16,
    # non-contiguous, conjugate views, async), every other op forwarded
    line = _native(run_mpi_shared, run_mpi_once, n, "ops")
    assert line.endswith(f"on {n} ranks, 0 failures"), line


def test_ddp_trains_identically(built, run_mpi_shared, run_mpi_once):
    line = _native(run_mpi_shared, run_mpi_once, 2, "ddp")
    assert line.startswith("native ddp: native,") and line.endswith("on 2 ranks, 0 failures"), line


@pytest.mark.parametrize("mode, summary", [("ops", "66 checks"), ("join", "4 parameters compared with gloo")])
def test_ranks_mixing_blocking_and_async_collectives(built, run_mpi_shared, mode, summary):
    # The fast path's blocking MPI_Allreduce/MPI_Bcast must match the other rank's
    # async op (worker_mixed.py; the Python group's run in test_mpi_backend.py).
    out = run_mpi_shared(2, SHARED_2, "worker_mixed.py", env=NATIVE)
    assert f"mixed {mode}: {summary} on 2 ranks, 0 failures; mpi group: native" in out, out


def test_native_disabled_falls_back_to_python(built, run_mpi):
    out = run_mpi("worker_native.py", 2, "fallback", env={"COMMTRACE_NATIVE": "0"}, timeout=120)
    assert "0 failures" in out, out


def test_traced_ddp_on_native_group(built, run_mpi, tmp_path):
    # The tracer wraps the native group like any other (TracedProcessGroup over it).
    out_dir = tmp_path / "trace"
    out = run_mpi(["-m", "commtrace", "run", "-o", out_dir, ROOT / "examples" / "ddp_mpi.py"], 2,
                  "--hidden", "200", "--epochs", "1", "--samples", "128", env=NATIVE, timeout=120)
    assert "backend=mpi world=2" in out
    import commtrace
    df = commtrace.load(str(out_dir))
    mpi = df[df["backend"].astype(str) == "mpi"]
    assert len(mpi) and set(mpi["status"]) == {"completed"}


def test_profiler_events_async_with_shapes(built, run_mpi_shared):
    # The fast path's own ops and the Python group's under it: every event async, as c10d's Work.
    out = run_mpi_shared(2, SHARED_2, "worker_profiler.py", env=NATIVE)
    assert out.count("on 2 ranks, path native, failures: []") == 2, out
