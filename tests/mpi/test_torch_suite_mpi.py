"""torch's own DistributedTest on our mpi backend, traced: 3 ranks under mpirun (torch's group
tests need 3), the ops only mpi runs there (all_to_all, recv from any source) included, and
tests that count the backend's profiler events (``mpi:<op>``, torch's call_dist_op and the
send/recv profiler tests). Those counts need the fast path (docs/mpi-backend.md, "Profiler
events": the Python group alone cannot mark an event async); where it cannot be built the
Python group runs the tests that count nothing, with torch's count left out."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import HERE, check, h, mpirun, native_build

TESTS = ("test_send_recv_any_source", "test_all_to_all", "test_all_to_all_group",
         "test_all_to_all_single_unequal_split", "test_broadcast", "test_scatter", "test_reduce_sum")
PROFILER_TESTS = ("test_send_recv_autograd_profiler", "test_send_recv_any_source_autograd_profiler",
                  "test_all_reduce_sum_async")


def test_distributed_test_on_mpi_traced(tmp_path):
    if importlib.util.find_spec("torch.testing._internal.distributed.distributed_test") is None:
        pytest.skip("this torch ships no DistributedTest")
    shutil.copy(HERE / "torch_suite_ranks.py", tmp_path / "test_dist_mpi.py")
    native, _ = native_build()
    tests = TESTS + PROFILER_TESTS if native else TESTS
    ids = [f"{tmp_path}/test_dist_mpi.py::TestMPIRanks::{t}" for t in tests]
    env = {"BACKEND": "mpi", "WORLD_SIZE": "3", "TEMP_DIR": str(tmp_path),
           "COMMTRACE_NATIVE": "1" if native else "0",
           "PYTHONPATH": str(HERE.parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if not native:
        env["NO_MPI_PROFILER_EVENTS"] = "1"
    out = check(mpirun(["-m", "commtrace", "run", "-o", tmp_path / "run", "-m", "pytest", "-q",
                        "-p", "no:cacheprovider", "--color=no", "--rootdir", tmp_path, *ids], 3, timeout=300, env=env))
    summaries = re.findall(r"^(\d+) passed", out, re.M)
    assert summaries == [str(len(tests))] * 3, out[-3000:]
    df = h.load(tmp_path / "run")
    assert {"all_to_all", "recv", "send"} <= set(df["op"]), set(df["op"])
    assert set(df["rank"]) == {0, 1, 2}
