"""Wall time and comm share (docs/report.md, banner) of a rank that lives in several
processes: the union of their lives, by hand. A process a rank forks (a DataLoader
worker) starts with its parent's start time, so a sum counted the parent again per worker
(pytorch/examples' minGPT with 4 workers per loader: 16.3 min for a 141 s run)."""
from __future__ import annotations

from commtrace.analysis.partitioned import analyse
from tracebuilder import Proc, write_run


def test_forked_worker_lives_inside_its_rank(tmp_path):
    parent, worker, other = Proc(0), Proc(0, pid=5000), Proc(1)
    parent.op("all_reduce", 0, 100, is_async=False)
    other.op("all_reduce", 0, 100, is_async=False)
    run = str(tmp_path)
    parent.write(run, 1_000)   # lives 0..1000 µs
    worker.write(run, 600)     # forked: the same start, ends at 600 µs, no op
    other.write(run, 800)      # lives 0..800 µs
    for info in (analyse(run, op_view=True).info, analyse(run, workers=1, memory_limit=1 << 20).info):
        assert info["wall_ns"] == 1_000_000                  # rank 0: 1000 µs (a sum: 1600)
        assert info["comm_share_per_rank"] == {0: 0.1, 1: 0.125}   # 100 µs of 1000, of 800
