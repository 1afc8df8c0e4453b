"""PyTorch's own distributed tests (torch.testing._internal's DistributedTest, gloo,
2 ranks) pass under ``commtrace run``, and every test's fresh world is traced.

This is the suite torch runs as test/distributed/test_distributed_spawn.py: each
test starts its own ranks, initializes from a file store, checks results and
tears down. A slice of collectives, p2p, object collectives, subgroups,
get_backend, monitored_barrier and DDP.

The ranks start from a forkserver (started once, under ``commtrace run``, with
distributed_test imported) instead of a spawn each: a spawned rank imports torch
and distributed_test afresh, about 4 s of CPU, 26 times (the slice cost 108 s of
CPU spawned, 13 s from the forkserver). Each test's ranks are still new processes
in a new world; commtrace in a spawned child is what tests/report's spawn_ddp and
tests/capture's all_ops spawn test.
"""
from __future__ import annotations

import re

import pytest

import helpers as h

RUNNER = '''\
import os

import torch.multiprocessing
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend

FORKSERVER = torch.multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload([__name__])


class Rank(FORKSERVER.Process):
    """A rank forked from the forkserver, with the environment a spawned one would
    inherit now (the forkserver's is from its start; each test sets its own TEMP_DIR)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.environ = dict(os.environ)

    def run(self):
        os.environ.clear()
        os.environ.update(self.environ)
        super().run()


class TestDistBackendForked(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(Rank)

    # pytest makes a placeholder instance named "runTest", which the MultiProcessTestCase
    # of older torch (2.4) looks up as a method: give it one (never selected below).
    def runTest(self):
        pass
'''

# Tests torch 2.13 runs on gloo/CPU/Linux (it skips e.g. test_new_subgroups and
# test_broadcast_object_list there itself).
TESTS = (
    "test_all_reduce_sum_async", "test_all_gather_coalesced_simple",
    "test_all_gather_object_subgroup", "test_barrier_full_group", "test_DistributedDataParallelCPU",
    "test_send_recv", "test_batch_isend_irecv_gloo", "test_ddp_logging_data_cpu",
    "test_scatter", "test_gather", "test_reduce_sum", "test_get_backend", "test_monitored_barrier_gloo",
)


def test_harness_probe_skips_only_where_the_import_fails():
    """The skip below says the harness does not import only where importing it fails
    (torch 2.5 prints on stdout while it imports without hypothesis: once a spurious skip)."""
    res = h.run([h.PY, "-c", "import torch.testing._internal.common_distributed"], timeout=120)
    assert (h.torch_test_harness_lacks() is None) == (res.returncode == 0), res.stderr[-2000:]


def test_torch_distributed_tests_pass_traced(tmp_path):
    why = h.torch_test_harness_lacks()
    if why:  # e.g. a torch install without its test requirements (expecttest)
        pytest.skip(f"torch's distributed test harness does not import here: {why}")
    (tmp_path / "test_dist_forked.py").write_text(RUNNER)
    (tmp_path / "tmp").mkdir()
    run_dir = tmp_path / "run"
    ids = [f"test_dist_forked.py::TestDistBackendForked::{t}" for t in TESTS]
    env = h.clean_env(BACKEND="gloo", WORLD_SIZE="2", TEMP_DIR=tmp_path / "tmp")
    res = h.run([h.PY, "-m", "commtrace", "run", "-o", run_dir, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-rs", *ids], env=env, cwd=str(tmp_path), timeout=400)
    res.check(0)
    summary = res.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert "failed" not in summary and "error" not in summary, summary
    assert passed == len(TESTS), f"{summary}\n{res.stdout[-3000:]}"
    df = h.load(run_dir)
    # every test's world kept apart (test_get_backend creates one but issues no op)
    assert df["world"].nunique() == passed - 1
    per_world = df.groupby("world")["rank"].nunique()
    assert set(per_world) == {2}, per_world.to_dict()
    ops = set(df["op"])
    assert {"all_reduce", "broadcast", "barrier", "all_gather", "send", "recv", "scatter", "gather",
            "reduce"} <= ops, ops
    ddp = df[df["variant"].astype(str).str.contains("allreduce") & (df["phase"].astype(str) == "backward")]
    assert len(ddp) > 0  # the DDP tests' bucket all_reduces, labelled by phase
