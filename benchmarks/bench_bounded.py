"""Bounded mode (``--keep-last N``, ``--steps A:B``): what it costs and what it bounds.

1. Hot path, side by side in one run (two gloo ranks): the same group through a
   traced wrapper recording in full and through one recording into a ring
   (``keep_last``), and one with a steps window, alternating in blocks (the
   machinery of bench_capture.py). The wrappers are the same code in every
   mode -- bounded mode works on the flush thread -- so the ratios should be 1.
2. Flush-thread CPU per op (the work bounded mode adds: choosing records,
   counting, rotating), per mode, timed on the flushing thread. Then the ring's
   call ordering (``capture.bounded.CallOrder``) on each wrapper: the ring's
   flush with it and without it, alternating rounds (``--order-rounds``).
3. A long run per mode through ``commtrace run`` (one rank, ``--ops`` ops in
   steps of 20 all_reduces and an SGD step; the modes take turns, ``--rounds``
   times): bytes on disk at the end, the process's resident memory at 25 %,
   50 % and 100 % of the ops (flat = bounded), the process's CPU time per op
   (all threads: the flush thread's work included) and ops/s (medians over
   rounds; ops/s moves with the machine's load, CPU time much less).

    python benchmarks/bench_bounded.py [--reps 15] [--calls 400] [--ops 200000] [--rounds 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench_capture  # noqa: E402

KEEP_LAST = 10_000
WINDOW = "10:10"
HOT_CASES = ("issue cost: all_reduce 1 elem async", "all_reduce 1 elem", "caller CPU: all_reduce 1 elem")
MODES = {"full": {}, "ring": {"COMMTRACE_KEEP_LAST": str(KEEP_LAST)}, "steps": {"COMMTRACE_STEPS": WINDOW}}
FLUSH_OPS = 20_000


def _recorder_in_mode(pg, run_dir: str, mode: str, wrapper: str = "auto"):
    """bench_capture.make_traced with the bounded options of ``mode`` (read from the
    environment when the Recorder is made, as in every traced process)."""
    saved = {k: os.environ.pop(k, None) for k in ("COMMTRACE_KEEP_LAST", "COMMTRACE_STEPS")}
    os.environ.update(MODES[mode])
    try:
        return bench_capture.make_traced(pg, run_dir, "gloo", wrapper)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def _flush_cost(pg, run_dir: str, mode: str, wrapper: str = "auto", call_order: bool = True) -> float:
    """ns of flush-thread work per op: FLUSH_OPS ops recorded with the flush thread
    stopped, then one flush timed (thread CPU time). ``call_order`` False: the
    ring's records are written as the flush finds them (the cost of CallOrder)."""
    import torch
    import torch.distributed as dist
    traced, rec = _recorder_in_mode(pg, run_dir, mode, wrapper)
    if not call_order:
        rec.sink.call_order = None
    rec.sink.stop.set()        # the periodic flush thread exits at its next wake-up
    time.sleep(0.6)
    opts = bench_capture._opts(dist.AllreduceOptions, False)
    one = torch.ones(1)
    for _ in range(FLUSH_OPS):
        traced.allreduce([one], opts).wait()
    t0 = time.thread_time_ns()
    rec.flush()
    cost = (time.thread_time_ns() - t0) / FLUSH_OPS
    rec.close()
    return cost


def _call_order_cost(pg, run_dir: str, rounds: int) -> dict:
    """Per wrapper: the ring's flush-thread ns per op with CallOrder and without,
    alternating (which goes first alternates too), and their ratio."""
    import statistics
    out = {}
    for wrapper in ("auto", "python"):
        runs: dict = {True: [], False: []}
        for i in range(rounds):
            for on in ((True, False) if i % 2 == 0 else (False, True)):
                runs[on].append(_flush_cost(pg, os.path.join(run_dir, f"{wrapper}-{i}-{on}"), "ring", wrapper, on))
        name = bench_capture.wrapper_kind(pg) if wrapper == "auto" else wrapper
        out[name] = {"with": statistics.median(runs[True]), "without": statistics.median(runs[False]),
                     "ratio": statistics.median(a / b for a, b in zip(runs[True], runs[False]))}
    return out


def _hot_worker(rank, port, calls, reps, out_path, order_rounds=5):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    pg = dist.distributed_c10d._get_default_group()
    d = tempfile.mkdtemp(prefix="ct-bench-bounded-")
    res = {"wrapper": bench_capture.wrapper_kind(pg), "hot": {}, "flush_ns_per_op": {}}
    try:
        full, rec_full = _recorder_in_mode(pg, os.path.join(d, "full"), "full")
        for mode in ("ring", "steps"):
            other, rec = _recorder_in_mode(pg, os.path.join(d, mode), mode)
            fns = bench_capture.case_fns(calls, HOT_CASES)
            res["hot"][mode] = {name: bench_capture.alternate(lambda: fn(full), lambda: fn(other), reps)
                                for name, fn in fns.items()}
            rec.close()
        rec_full.close()
        for mode in MODES:
            res["flush_ns_per_op"][mode] = _flush_cost(pg, os.path.join(d, "flush-" + mode), mode)
        res["call_order_flush_ns_per_op"] = _call_order_cost(pg, os.path.join(d, "order"), order_rounds)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()


# -- long run ------------------------------------------------------------------------

def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def long_run_worker(ops: int, out_path: str) -> None:
    """One rank: ``ops`` all_reduces, 20 per step (and an SGD step)."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{bench_capture.free_port()}", rank=0,
                            world_size=1)
    w = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=0.0)
    x = torch.ones(1)
    rss = {}
    marks = {ops // 4: "25%", ops // 2: "50%"}
    t0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(1, ops + 1):
        dist.all_reduce(x)
        if i % 20 == 0:
            w.grad = torch.zeros(1)
            opt.step()
        if i in marks:
            rss[marks[i]] = _rss_kib()
    rss["100%"] = _rss_kib()
    with open(out_path, "w") as f:
        # CPU of the whole process (every thread: the flush thread's work included)
        # per op: steadier on a shared machine than throughput.
        json.dump({"rss_kib": rss, "ops_per_s": ops / (time.perf_counter() - t0),
                   "cpu_us_per_op": (time.process_time() - cpu0) * 1e6 / ops}, f)
    dist.destroy_process_group()


def _long_run(mode: str, ops: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        run_dir, res = os.path.join(d, "run"), os.path.join(d, "res.json")
        flags = {"full": [], "ring": ["--keep-last", str(KEEP_LAST)], "steps": ["--steps", WINDOW]}[mode]
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMMTRACE")}
        env.update(OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
        p = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", run_dir, *flags, __file__,
                            "--long-worker", str(ops), res], env=env, capture_output=True, text=True,
                           timeout=timeout)
        if p.returncode != 0:
            return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:]}
        with open(res) as f:
            r = json.load(f)
        r["disk_bytes"] = sum(os.path.getsize(os.path.join(run_dir, n)) for n in os.listdir(run_dir))
        return r


def long_runs(ops: int, rounds: int = 3, timeout: float = 900) -> dict:
    """Per mode: disk and memory of the last round, ops/s the median over rounds
    (the modes take turns going first: the machine's load hits them alike)."""
    import statistics
    runs: dict = {m: [] for m in MODES}
    order = list(MODES)
    for i in range(rounds):
        for mode in order[i % len(order):] + order[:i % len(order)]:
            runs[mode].append(_long_run(mode, ops, timeout))
    out = {}
    for mode, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            out[mode] = rs[-1]
            continue
        out[mode] = {**ok[-1], **{k: statistics.median(r[k] for r in ok) for k in ("ops_per_s", "cpu_us_per_op")},
                     **{k + "_spread": [min(r[k] for r in ok), max(r[k] for r in ok)]
                        for k in ("ops_per_s", "cpu_us_per_op")}}
    return out


def run(calls: int = 400, reps: int = 15, ops: int = 200_000, rounds: int = 3, order_rounds: int = 5) -> dict:
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hot.json")
        mp.spawn(_hot_worker, args=(bench_capture.free_port(), calls, reps, path, order_rounds), nprocs=2)
        with open(path) as f:
            res = json.load(f)
    res["long"] = long_runs(ops, rounds)
    res["ops"] = ops
    res["keep_last"] = KEEP_LAST
    res["window"] = WINDOW
    return res


def print_tables(res: dict) -> None:
    print(f"[bounded mode] {res['wrapper']} wrapper; ring: keep_last {res['keep_last']:,}; steps window {res['window']}")
    print(f"{'case':40} {'mode':6} {'full µs':>9} {'mode µs':>9} {'added µs':>9} {'ratio':>7} {'ratio spread':>14}")
    for mode, cases in res["hot"].items():
        for name, r in cases.items():
            spread = f"{r['ratio_spread'][0]:.3f}..{r['ratio_spread'][1]:.3f}"
            print(f"{name:40} {mode:6} {r['plain']:9.2f} {r['traced']:9.2f} {r['added']:9.2f} {r['ratio']:7.3f} "
                  f"{spread:>14}")
    print("flush-thread CPU per op: " + ", ".join(f"{m} {v / 1e3:.2f} µs" for m, v in res["flush_ns_per_op"].items()))
    print("ring flush per op, with call order / without: " + ", ".join(
        f"{w} wrapper {r['with'] / 1e3:.2f} / {r['without'] / 1e3:.2f} µs ({r['ratio']:.3f}x)"
        for w, r in res.get("call_order_flush_ns_per_op", {}).items()))
    print(f"long run, {res['ops']:,} ops (20 per step), one rank:")
    print(f"{'mode':6} {'disk':>12} {'B/op':>8} {'RSS 25%':>10} {'RSS 50%':>10} {'RSS 100%':>10} {'CPU µs/op':>18} "
          f"{'ops/s':>9}")
    for mode, r in res["long"].items():
        if "error" in r:
            print(f"{mode:6} failed: {r['error']}")
            continue
        rss = r["rss_kib"]
        print(f"{mode:6} {r['disk_bytes']:12,} {r['disk_bytes'] / res['ops']:8.2f} {rss['25%'] / 1024:9.1f}M "
              f"{rss['50%'] / 1024:9.1f}M {rss['100%'] / 1024:9.1f}M {r['cpu_us_per_op']:6.2f} "
              f"({r['cpu_us_per_op_spread'][0]:.2f}..{r['cpu_us_per_op_spread'][1]:.2f}) {r['ops_per_s']:9,.0f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3, help="long runs per mode")
    ap.add_argument("--order-rounds", type=int, default=5, help="ring flushes with and without call order")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--long-worker", nargs=2, metavar=("OPS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.long_worker:
        long_run_worker(int(args.long_worker[0]), args.long_worker[1])
        return 0
    res = run(args.calls, args.reps, args.ops, args.rounds, args.order_rounds)
    print_tables(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
