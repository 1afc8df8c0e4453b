"""torch's distributed test harness (MultiProcessTestCase), 2 ranks on gloo: one test that runs a
collective, one that skips itself on every rank for lack of GPUs (its ranks exit with the
harness's TEST_SKIPS code: the harness knows 2 to 8 GPUs)."""
import unittest

import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase, skip_if_lt_x_gpu


class HarnessSkip(MultiProcessTestCase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @property
    def world_size(self):
        return 2

    def test_runs(self):
        dist.init_process_group("gloo", init_method=f"file://{self.file_name}", rank=self.rank,
                                world_size=self.world_size)
        t = torch.ones(4)
        dist.all_reduce(t)
        assert t[0].item() == 2.0
        dist.destroy_process_group()

    @skip_if_lt_x_gpu(8)   # no machine of the suite's has 8 GPUs
    def test_needs_gpus(self):
        raise AssertionError("unreachable: skipped")


if __name__ == "__main__":
    unittest.main()   # not torch's run_tests: under CI=true it writes XML reports (xmlrunner)
