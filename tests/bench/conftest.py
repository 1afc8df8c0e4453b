import os
import sys

import helpers
import pytest

sys.path.insert(0, os.path.join(helpers.REPO, "benchmarks"))
import bench_capture  # noqa: E402


@pytest.fixture(scope="module")
def suite_ports():
    """The benchmarks' rendezvous ports from helpers.free_port (bench_capture.free_port, which
    every benchmark asks, binds port 0: in the range where the other worker's connections land)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_capture, "free_port", helpers.free_port)
        yield
