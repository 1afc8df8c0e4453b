"""Start-up cost of measuring clock offsets (capture/clock.py) for 2..64 ranks.

    python benchmarks/bench_clock.py [--ranks 2,4,8,16,32,64] [--reps 3] [--json FILE]

Every rank is a forked process of this machine (oversubscribed: 64 ranks on 2
cores here) posing as a host of its own (``COMMTRACE_TEST_HOST``), so that every
rank is measured -- the worst case; ranks on rank 0's machine skip the group;
every repetition is a fresh job. Side by side in the same
processes: the user's ``init_process_group("gloo")`` (over a TCPStore), then what
the process-group hook adds to it -- joining commtrace's private gloo group and
the ping-pong of every rank with rank 0 ("start") -- then the ping-pong alone
again (what "end" costs at exit, the group being kept). Each phase starts
together on all ranks (store barrier); its cost is the slowest rank's.
Reported: medians over repetitions (min..max), and the ratio of the start cost
to init_process_group's. Budget: start <= 1 s at 64 ranks.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_capture  # noqa: E402


def _barrier(store, name: str, size: int) -> None:
    if store.add(f"bench/{name}", 1) == size:
        store.set(f"bench/{name}/go", "1")
    store.wait([f"bench/{name}/go"], timedelta(seconds=300))


def _rank(rank: int, size: int, port: int, out) -> None:
    import torch.distributed as dist
    from torch.distributed import PrefixStore, TCPStore

    from commtrace.capture.clock import ClockGroup
    from commtrace.trace import simhost

    os.environ[simhost.HOST_ENV] = f"bench-host-{rank}"  # every rank on a machine of its own: all measured
    simhost.reset()
    store = TCPStore("127.0.0.1", port, size, rank == 0, timedelta(seconds=300))
    _barrier(store, "init", size)
    t0 = time.perf_counter()
    world_store = PrefixStore("world/", store)
    dist.init_process_group("gloo", store=world_store, rank=rank, world_size=size)
    t1 = time.perf_counter()
    _barrier(store, "clock", size)
    t2 = time.perf_counter()
    group = ClockGroup.join(world_store, rank, size)  # what the hook does, on the world's store
    t3 = time.perf_counter()
    ok_start = group.measure("start", 120.0) is not None
    t4 = time.perf_counter()
    _barrier(store, "end", size)
    t5 = time.perf_counter()
    ok_end = group.measure("end", 120.0) is not None
    t6 = time.perf_counter()
    out.put((rank, {"init": t1 - t0, "join": t3 - t2, "start": t4 - t2, "end": t6 - t5, "ok": ok_start and ok_end}))
    _barrier(store, "done", size)
    dist.destroy_process_group()


def _job(size: int) -> dict:
    """One fresh job of ``size`` ranks (a world is created once per process, as
    in a real run): per phase the slowest rank's seconds."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    port = bench_capture.free_port()
    procs = [ctx.Process(target=_rank, args=(r, size, port, q)) for r in range(size)]
    for p in procs:
        p.start()
    got = [q.get(timeout=600)[1] for _ in procs]
    for p in procs:
        p.join(60)
    return {**{k: max(g[k] for g in got) for k in ("init", "join", "start", "end")}, "ok": all(g["ok"] for g in got)}


def measure(size: int, reps: int) -> dict:
    jobs = [_job(size) for _ in range(reps)]
    col = {k: [j[k] for j in jobs] for k in ("init", "join", "start", "end")}
    return {"ranks": size, "reps": reps, "ok": all(j["ok"] for j in jobs), **{k: _stats(v) for k, v in col.items()},
            "ratio_start_to_init": _stats([j["start"] / j["init"] for j in jobs])}


def _stats(v: list[float]) -> dict:
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def run(ranks=(2, 4, 8, 16, 32, 64), reps: int = 3) -> list[dict]:
    os.environ.pop("COMMTRACE_DIR", None)  # measure the protocol itself, untraced
    import torch.distributed  # noqa: F401  (once, before the ranks are forked)

    import commtrace.capture.clock  # noqa: F401
    return [measure(n, reps) for n in ranks]


def table(results: list[dict]) -> str:
    def ms(s):
        return f"{s['median'] * 1e3:.1f} ms ({s['min'] * 1e3:.1f}..{s['max'] * 1e3:.1f})"
    lines = ["| ranks | init_process_group | clock start (join + ping-pong) | of which join | end (ping-pong) | start / init |",
             "|---|---|---|---|---|---|"]
    for r in results:
        q = r["ratio_start_to_init"]
        lines.append(f"| {r['ranks']} | {ms(r['init'])} | {ms(r['start'])} | {ms(r['join'])} | {ms(r['end'])} | "
                     f"{q['median']:.2f}x ({q['min']:.2f}..{q['max']:.2f})" + ("" if r["ok"] else " FAILED") + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4,8,16,32,64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    ns = ap.parse_args()
    res = run([int(x) for x in ns.ranks.split(",")], ns.reps)
    print(table(res))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
