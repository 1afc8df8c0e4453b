"""The executors of the partitioned analysis (analysis.partitioned.executors) with real worker processes."""
from __future__ import annotations

import os
import signal

import pytest

from commtrace.analysis.partitioned.executors import PoolExecutor, SerialExecutor, make_executor
from commtrace.errors import CommtraceError


def _square(x):
    return x * x


def _killed(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)   # as the OOM killer would
    return x


def test_pool_yields_every_result():
    ex = make_executor(None, 2)
    try:
        assert isinstance(ex, PoolExecutor)
        assert sorted(ex.map(_square, range(10))) == [i * i for i in range(10)]
    finally:
        ex.close()
    assert isinstance(make_executor(None, 1), SerialExecutor)


def test_a_killed_worker_is_one_clear_error():
    ex = make_executor(None, 2)
    try:
        with pytest.raises(CommtraceError, match="worker process of the analysis died"):
            list(ex.map(_killed, range(8)))
    finally:
        ex.close()
