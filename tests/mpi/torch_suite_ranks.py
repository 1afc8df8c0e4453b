"""torch's DistributedTest with BACKEND=mpi: the mpirun processes are the ranks (torch spawns
none for mpi). test_torch_suite_mpi.py copies this file into a temporary folder and runs pytest on it."""
import functools
import os
from datetime import timedelta

if os.environ.get("RUN_UNTRACED"):
    import commtrace.mpi
    commtrace.mpi.install()

import unittest
from mpi4py import MPI
import torch.distributed as dist
from torch.testing._internal.common_distributed import TEST_SKIPS, MultiProcessTestCase
from torch.testing._internal.distributed import distributed_test as dt
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend

COMM = MPI.COMM_WORLD
if os.environ.get("NO_MPI_PROFILER_EVENTS"):
    # the Python group alone cannot mark its "mpi:<op>" events async (docs/mpi-backend.md,
    # "Profiler events"): leave torch's count out there to see the rest
    for names in (dt.PROFILING_SUPPORTED_BACKENDS, dt.CUDA_PROFILING_SUPPORTED_BACKENDS,
                  dt.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
        names.remove(dist.Backend.MPI)
SKIP_CODES = {s.exit_code: s.message for s in TEST_SKIPS.values()}


class TestMPIRanks(TestDistBackend, DistributedTest._DistTestBase):
    def join_or_run(self, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            try:
                fn()
            except SystemExit as e:
                if e.code in SKIP_CODES:
                    raise unittest.SkipTest(SKIP_CODES[e.code])
                raise
        return wrapper

    def setUp(self):
        # torch's TestCase.setUp (seeds the RNGs alike on every rank), not MultiProcessTestCase's (spawn state)
        super(MultiProcessTestCase, self).setUp()
        self.skip_return_code_checks = []
        self.processes = []
        COMM.Barrier()
        if COMM.rank == 0:
            dt.initialize_temp_directories()
        os.environ["TEMP_DIR"] = COMM.bcast(os.environ.get("TEMP_DIR"), root=0)
        self.file_name = os.path.join(os.environ["TEMP_DIR"], "init_dir", "pg")
        dt.Barrier.barrier_id = 0
        COMM.Barrier()
        self.rank = COMM.rank
        name = self._testMethodName
        dist.init_process_group(init_method=self.init_method, backend="mpi",
                                world_size=int(self.world_size), rank=self.rank,
                                timeout=timedelta(seconds=dt.CUSTOM_PG_TIMEOUT.get(name, dt.default_pg_timeout)))
        self._barrier()

    def tearDown(self):
        try:
            if dist.is_initialized():
                self._barrier()
                dist.destroy_process_group()
        finally:
            COMM.Barrier()
            if COMM.rank == 0:
                dt.cleanup_temp_dir()
            COMM.Barrier()

    def runTest(self):
        pass
