"""The simulated two-host launches (clock_hosts.py), each run once per module."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clock_hosts import LAUNCHES, HostsRun  # noqa: E402


@pytest.fixture(scope="module", params=sorted(LAUNCHES))
def hosts_run(request, tmp_path_factory) -> HostsRun:
    return LAUNCHES[request.param](tmp_path_factory.mktemp(f"clock-{request.param}"))
