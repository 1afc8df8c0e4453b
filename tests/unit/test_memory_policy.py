"""analysis.memory_policy and the CLI's --memory-limit: the limit's syntax and whether a
run held whole fits it (the one rule report, compare and check follow)."""
import pytest

from commtrace.analysis import memory_policy as mp
from commtrace.cli.options import memory_limit_of
from commtrace.errors import CommtraceError
from commtrace.trace import schema


def test_memory_limit_syntax():
    assert memory_limit_of(None) is None
    assert [memory_limit_of(t) for t in ("8G", "512M", "2k", "100", "1.5GB")] == [
        8 << 30, 512 << 20, 2048, 100, 3 << 29]
    assert memory_limit_of("50%") == int(mp.total_memory() * 0.5)
    assert mp.default_memory_limit() == int(mp.total_memory() * mp.DEFAULT_MEMORY_FRACTION)
    assert mp.memory_limit(None) == mp.default_memory_limit() and mp.memory_limit(123) == 123
    for bad in ("lots", "0", "-1G", "%"):
        with pytest.raises(CommtraceError, match="not a size"):
            memory_limit_of(bad)


def test_whole_run_fits_counts_op_records_at_the_whole_run_cost(tmp_path):
    for name in ("rank0.pid1", "rank1.pid2"):      # 10 records in all: 3,000 B at 300 B/op
        (tmp_path / (name + schema.OPS_SUFFIX)).write_bytes(b"\0" * (5 * schema.RECORD_SIZE))
    (tmp_path / "notes.bin").write_bytes(b"\0" * 10_000)   # not an ops file
    assert not mp.needs_partitions(str(tmp_path), 3_000, 300)
    assert mp.needs_partitions(str(tmp_path), 2_999, 300)
    assert mp.needs_partitions(str(tmp_path), 2_999)           # the default cost: WHOLE_RUN_BYTES_PER_OP
    assert not mp.needs_partitions(str(tmp_path), 3_000)
