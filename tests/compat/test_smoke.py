"""The mission's commands on the installed torch: the smoke suite `make test-compat`
runs against the oldest, a middle and the newest supported release (each in its
own venv, `make test-compat`), and `make test` on the pin.

Each launch is a real job: mpirun on the mpi backend and on gloo, torchrun,
mp.spawn, and `COMMTRACE=1` under torchrun; then report, compare and check on
what they wrote. Every expectation is the DDP sequence written out by hand in
ddp_env.py's docstring.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ddp_env.py")
STEPS = 3
SPAWN_EXAMPLE = os.path.join(h.REPO, "examples", "ddp_gloo_spawn.py")


def _expected_ops() -> list[tuple]:
    """(op, phase, iteration) per rank in issue order, for STEPS steps of ddp_env.py."""
    rows = [("all_gather", "ddp_init", 0), ("broadcast", "ddp_init", 0), ("broadcast", "ddp_init", 0)]
    for it in range(1, STEPS + 1):
        if it == 2:
            rows += [("broadcast", "forward", 2)] * 2       # the bucket rebuild
        rows.append(("all_reduce", "backward", it))
    return rows


def _ops(df, rank: int) -> list[tuple]:
    r = df[df["rank"] == rank].sort_values("t_start_ns")
    return [(str(o), None if p is None or str(p) == "nan" else str(p), int(i))
            for o, p, i in zip(r["op"], r["phase"].astype(object).where(r["phase"].notna(), None), r["iteration"])]


def _losses(out_prefix, world: int = 2) -> list:
    return [json.load(open(f"{out_prefix}.rank{r}.json")) for r in range(world)]


def _check_ddp_run(run_dir, world: int = 2) -> None:
    df = h.load(run_dir)
    for rank in range(world):
        assert _ops(df, rank) == _expected_ops(), rank
    assert set(df["status"].astype(str)) == {"completed"}
    wanted = "native" if _native_built() else "python"
    assert h.group_wrappers(run_dir) == {wanted}


def _native_built() -> bool:
    from commtrace import native
    from commtrace.capture import native_wrapper
    return native.mode() != "off" and native_wrapper.module() is not None


@pytest.fixture(scope="module")
def built():
    """`commtrace build-native` builds every extension on a supported torch."""
    if native_off():
        pytest.skip("COMMTRACE_NATIVE=0")
    if shutil.which(os.environ.get("CXX", "c++").split()[0]) is None:
        pytest.skip("no C++ compiler")
    r = h.run([h.PY, "-m", "commtrace", "build-native"], timeout=1200).check()
    return r.stdout + r.stderr


def native_off() -> bool:
    from commtrace import native
    return native.mode() == "off"


def test_every_extension_builds(built):
    from commtrace import torch_compat
    if torch_compat.unsupported_reason():
        pytest.skip(torch_compat.unsupported_reason())
    for label in ("analysis kernels", "native wrapper", "fatal-signal handler", "mpi fast path"):
        line = next((x for x in built.splitlines() if x.startswith(label + ":")), None)
        assert line is not None and "not built" not in line, (label, built)


def test_mpirun_on_the_mpi_backend(tmp_path, built):
    out = tmp_path / "losses"
    run_dir = tmp_path / "run"
    r = h.run(h.mpirun_cmd(2, *h.commtrace_cmd(run_dir, SCRIPT, "mpi", STEPS, out)), env=h.mpi_env(), timeout=180)
    r.check()
    _check_ddp_run(run_dir)
    assert {str(b) for b in h.load(run_dir)["backend"]} == {"mpi"}
    untraced = tmp_path / "plain"
    # untraced, the same script needs the backend installed by hand: commtrace.mpi.install()
    h.run(h.mpirun_cmd(2, h.PY, "-c", "import commtrace.mpi, runpy, sys; commtrace.mpi.install(); "
                       f"sys.argv = {[SCRIPT, 'mpi', str(STEPS), str(untraced)]!r}; "
                       "runpy.run_path(sys.argv[0], run_name='__main__')"), env=h.mpi_env(), timeout=180).check()
    assert _losses(out) == _losses(untraced)
    rep = h.run([h.PY, "-m", "commtrace", "report", str(run_dir), "--width", "200"]).check()
    assert "steps" in rep.stdout.lower()
    h.run([h.PY, "-m", "commtrace", "check", str(run_dir)]).check(0)


def test_mpirun_on_gloo(tmp_path, built):
    run_dir = tmp_path / "run"
    r = h.run(h.mpirun_cmd(2, *h.commtrace_cmd(run_dir, SCRIPT, "gloo", STEPS, tmp_path / "l")),
              env=h.mpi_env(), timeout=180)
    r.check()
    _check_ddp_run(run_dir)


def test_torchrun_and_compare(tmp_path, built):
    runs = []
    for name in ("a", "b"):
        run_dir = tmp_path / name
        h.run([h.TORCHRUN, "--nproc_per_node", "2", "--master_port", str(h.free_port()), "-m", "commtrace", "run",
               "-o", str(run_dir), SCRIPT, "gloo", str(STEPS), str(tmp_path / name)], timeout=180).check()
        _check_ddp_run(run_dir)
        runs.append(run_dir)
    cmp = h.run([h.PY, "-m", "commtrace", "compare", str(runs[0]), str(runs[1]), "--width", "200"]).check()
    assert "all_reduce" in cmp.stdout


def test_commtrace_env_var_under_torchrun(tmp_path, built):
    run_dir = tmp_path / "run"
    env = h.clean_env(COMMTRACE="1", COMMTRACE_DIR=str(run_dir))
    h.run([h.TORCHRUN, "--nproc_per_node", "2", "--master_port", str(h.free_port()), SCRIPT, "gloo", str(STEPS),
           str(tmp_path / "l")], env=env, timeout=180).check()
    _check_ddp_run(run_dir)


def test_mp_spawn(tmp_path, built):
    run_dir = tmp_path / "run"
    h.run(h.commtrace_cmd(run_dir, SPAWN_EXAMPLE, "--steps", "3"), env=h.clean_env(MASTER_PORT=h.free_port()),
          timeout=180).check()
    df = h.load(run_dir)
    for rank in (0, 1):
        r = df[df["rank"] == rank]
        assert (r["phase"].astype(str) == "backward").sum() == 3
        assert (r["phase"].astype(str) == "ddp_init").sum() == 3
    h.run([h.PY, "-m", "commtrace", "check", str(run_dir)]).check(0)


def test_python_mpi_group_keeps_ddp_works_alive(tmp_path):
    # tests/mpi runs on the pinned torch, whose C++ keeps a Python Work alive; torch 2.4's does
    # not, and DDP's buffer broadcasts below MPI_THREAD_MULTIPLE hung there on every run until
    # commtrace.mpi kept finished works until claimed (tests/mpi/worker_lifetime.py says how).
    worker = os.path.join(HERE, "..", "mpi", "worker_lifetime.py")
    r = h.run(h.mpirun_cmd(2, h.PY, worker, "serialized", "5"), timeout=120,
              env=h.mpi_env(COMMTRACE_NATIVE="0", OMP_NUM_THREADS="1"))
    r.check()
    assert "lifetime serialized: 5 forwards, buffers agree on 2 ranks" in r.stdout



@pytest.mark.parametrize("native", ["1", "0"])
def test_group_methods_reach_the_real_group(tmp_path, built, native):
    # Methods the base class runs on the group object, here the wrapper: on torch 2.15 split_group
    # (which builds the new group from the wrapper's store, none) killed every rank by SIGSEGV, and
    # hooks registered on the world group never ran. Both wrappers hand them to the real group.
    worker = os.path.join(HERE, "group_methods_worker.py")
    h.run([h.PY, worker, str(h.free_port()), str(tmp_path / "plain")], env=h.clean_env(), timeout=120).check(0)
    run_dir = tmp_path / "run"
    h.run(h.commtrace_cmd(run_dir, worker, str(h.free_port()), str(tmp_path / "traced")),
          env=h.clean_env(COMMTRACE_NATIVE=native), timeout=120).check(0)
    seen = [json.loads((tmp_path / f"plain.rank{r}.json").read_text()) for r in (0, 1)]
    assert [json.loads((tmp_path / f"traced.rank{r}.json").read_text()) for r in (0, 1)] == seen
    if all("hooks" not in r and not isinstance(r["split"], list) for r in seen):
        pytest.skip("this torch has no group hooks and splits no group on CPU")
    assert h.group_wrappers(run_dir) == {"native" if native == "1" else "python"}
    if isinstance(seen[0]["split"], list):
        df = h.load(run_dir)
        split = df[df["group_desc"].astype(str).str.contains(":split:")]
        for rank in (0, 1):
            assert sorted(split[split["rank"] == rank]["op"].astype(str)) == ["all_reduce", "barrier"]


@pytest.mark.parametrize("native", ["1", "0"])
def test_mpi_backend_gather_single(tmp_path, built, native):
    # torch 2.15's gather_single (gather_into_tensor) reached the mpi backend's base class, which has
    # no backend to run it: "No backend type associated with device type cpu", traced or not.
    import torch.distributed as dist
    if not hasattr(dist, "gather_single"):
        pytest.skip("this torch has no dist.gather_single")
    worker = os.path.join(HERE, "mpi_gather_single.py")
    env = h.mpi_env(COMMTRACE_NATIVE=native)
    plain = h.run(h.mpirun_cmd(2, h.PY, worker, "--install"), env=env, timeout=120).check(0)
    run_dir = tmp_path / "run"
    traced = h.run(h.mpirun_cmd(2, *h.commtrace_cmd(run_dir, worker)), env=env, timeout=120).check(0)
    rows = sorted((json.loads(line) for line in plain.stdout.splitlines() if line.startswith("{")),
                  key=lambda r: r["rank"])
    assert rows == [{"rank": 0, "to_one": None, "async": None, "to_zero": [[100.0, 100.0], [200.0, 200.0]]},
                    {"rank": 1, "to_one": [1.0, 1.0, 2.0, 2.0], "async": [10.0, 10.0, 20.0, 20.0], "to_zero": None}]
    assert sorted(line for line in traced.stdout.splitlines() if line.startswith("{")) == \
        sorted(line for line in plain.stdout.splitlines() if line.startswith("{"))
    df = h.load(run_dir)
    for rank in (0, 1):
        mine = df[df["rank"] == rank].sort_values("t_start_ns")
        assert [(str(o), int(b), int(r)) for o, b, r in zip(mine["op"], mine["bytes"], mine["root"])] == \
            [("gather", 8, 1), ("gather", 8, 1), ("gather", 8, 0)]
