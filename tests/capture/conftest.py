"""Session-scoped launches shared by the capture tests.

Each heavy launch (spawned ranks, mpirun, DDP) runs once per session and every
test asserts on its trace. All launches have timeouts (see tests/helpers.py).
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402
from helpers import Launch, worker  # noqa: E402


@pytest.fixture(scope="session")
def launches(tmp_path_factory):
    """Launch cache: ``launches(key, fn)`` runs ``fn(tmpdir)`` once per session."""
    cache: dict = {}

    def get(key, fn):
        if key not in cache:
            cache[key] = fn(tmp_path_factory.mktemp(key))
        return cache[key]
    return get


def launch_all_ops(kind: str, world: int, tmp, wrapper: str = "native") -> Launch:
    run_dir, out = tmp / "run", tmp / "res"
    script = worker("all_ops.py")
    # "python": the Python wrapper, as where the native one cannot be built or is disabled.
    extra = {"COMMTRACE_NATIVE": "0"} if wrapper == "python" else {}
    extra["ALL_OPS_LEAVE_OUT"] = ",".join(h.gloo_missing_ops())  # the ops this torch's gloo lacks
    if kind == "spawn":
        res = h.run(h.commtrace_cmd(run_dir, script, world, h.free_port(), out), env=h.clean_env(**extra),
                    timeout=120)
    else:
        res = h.run(h.mpirun_cmd(world, h.PY, "-m", "commtrace", "run", "-o", run_dir, script, out),
                    env=h.mpi_env(**extra), timeout=150)
    return Launch(res, run_dir, out)


@pytest.fixture(scope="session", params=[("spawn", 2, "native"), ("mpirun", 2, "native"), ("mpirun", 3, "native"),
                                         ("spawn", 2, "python")],
                ids=["spawn-2", "mpirun-2", "mpirun-3", "spawn-2-python-wrapper"])
def all_ops(request, launches) -> Launch:
    kind, world, wrapper = request.param
    if wrapper == "native":
        h.ensure_native_wrapper()
    launch = launches(f"allops-{kind}-{world}-{wrapper}", lambda tmp: launch_all_ops(kind, world, tmp, wrapper))
    launch.result.check(0)
    launch.world = world
    launch.wrapper = wrapper
    launch.left_out = h.gloo_missing_ops()  # {op: gloo's error}: the worker did not call these
    return launch
