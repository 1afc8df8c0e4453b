"""Untraced 2-rank gloo world; each rank measures clock offsets on it the way a
later ``commtrace.start()`` would (clock_group.track_world with the world's
store), then again (measure_tracked), then as two ranks of one machine (no
shift: nothing to measure), and writes what it saw to OUT.rank<R>.

    worker_api.py PORT OUT
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.multiprocessing as mp

SHIFT_NS = 3_000_000_000  # rank 1's simulated clock shift


class Lines:
    """Receives the clock lines (the recorder's mark_clock interface)."""
    closed = False

    def __init__(self):
        self.lines = []

    def mark_clock(self, line):
        self.lines.append(line)


def state(pg) -> dict:
    w = c10d._world
    return {"group_count": w.group_count, "pg_names": sorted(w.pg_names.values()), "groups": len(w.pg_map),
            "seq": pg._get_sequence_number_for_group(), "world_size": dist.get_world_size()}


def main(rank: int, port: str, out: str) -> None:
    if rank == 1:
        os.environ["COMMTRACE_TEST_CLOCK_SHIFT_NS"] = str(SHIFT_NS)
    from commtrace.capture import clock as clock_group
    from commtrace.trace import simhost
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    pg = c10d._get_default_group()
    dist.all_reduce(torch.ones(1))
    before = state(pg)
    store = c10d._world.pg_map[pg][1]
    sink = Lines()
    started = clock_group.track_world(sink, store, rank, 2, "w", dist.get_backend())
    again = clock_group.measure_tracked("stop")
    after = state(pg)
    x = torch.ones(1)
    dist.all_reduce(x)
    # Both ranks on one machine again (rank 1 drops its simulated clock): nothing to measure.
    os.environ.pop("COMMTRACE_TEST_CLOCK_SHIFT_NS", None)
    simhost.reset()
    same = Lines()
    same_known = clock_group.track_world(same, store, rank, 2, "w", dist.get_backend())
    with open(f"{out}.rank{rank}", "w") as f:
        json.dump({"started": started, "again": again, "lines": sink.lines, "before": before, "after": after,
                   "sum": x.item(), "seq_after_op": pg._get_sequence_number_for_group(),
                   "same_known": same_known, "same_lines": same.lines}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(main, args=(sys.argv[1], sys.argv[2]), nprocs=2, start_method="fork")
