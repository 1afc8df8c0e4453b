"""DDP step time through the whole `commtrace run` path, traced / untraced, side by side in one job.

bench_ddp.py wraps a group with the real Recorder but installs nothing else.
`commtrace run` also installs the phase hooks (DDP constructor/forward,
autograd engine, optimizer step: labels and compute spans), looks up each
op's call site, and runs the flush thread and the watchdog. This benchmark
measures all of that: each of two gloo ranks (torch.multiprocessing.spawn)
calls ``commtrace.start()`` after ``init_process_group`` -- the same
activation `commtrace run` performs in each process, with the default group
wrapped in place -- then builds two identical DDP replicas per model: one on
the raw gloo group (taken before ``start()``), one on the group tracing
installed. Blocks of steps alternate between

  plain  tracing stopped (``commtrace.stop()``), the replica on the raw group
  run    tracing on (``commtrace.start()`` again: new trace files, hooks,
         call sites, flush thread, watchdog), the replica on the traced group

in ABBA order (plain-run, run-plain, ...); start/stop happen between blocks,
outside the timing. What remains of commtrace in a plain block: the phase
hooks stay installed while stopped and return after one check (a few Python
calls per step), so the ratio can only understate by that much.

A block's figure is its mean step time; the ratio is the median over blocks of
run / paired plain, with the spread (min..max) and a 95 % interval of the
median (intervals.py). The same is reported for the process's CPU time per
step (all threads: the caller, gloo's workers, commtrace's flush thread),
which other jobs' load disturbs less than wall time. After the run the trace is loaded to report how many
ops and compute spans the run blocks recorded.

    python benchmarks/bench_run_path.py [--models mlp8,cnn,mlp100m] [--reps 41] [--steps 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_capture  # noqa: E402
import bench_ddp  # noqa: E402

MODES = ("plain", "run")


def _tracing(on: bool, run_dir: str) -> None:
    import commtrace
    from commtrace.capture.session import tracing
    if on and not tracing():
        commtrace.start(out_dir=run_dir)
    elif not on and tracing():
        commtrace.stop()


def _block(model, opt, x, steps: int) -> tuple[float, float]:
    """(wall ns, process CPU ns) per step over ``steps`` steps."""
    w0, c0 = time.perf_counter_ns(), time.process_time_ns()
    for _ in range(steps):
        bench_ddp._step(model, opt, x)
    return (time.perf_counter_ns() - w0) / steps, (time.process_time_ns() - c0) / steps


def _worker(rank, port, models, reps, steps, out_path, run_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    raw = dist.distributed_c10d._get_default_group()
    _tracing(True, run_dir)
    traced = dist.distributed_c10d._get_default_group()
    results = {"wrapper": type(traced).__name__, "models": {}}
    for name in models:
        base, x, desc = bench_ddp.build(name)
        replicas = {"plain": DDP(copy.deepcopy(base), process_group=raw), "run": DDP(base, process_group=traced)}
        opts = {m: torch.optim.SGD(replicas[m].parameters(), lr=1e-4) for m in MODES}
        for m in MODES:  # warm-up: DDP's first iterations (bucket rebuild), sig interning
            _tracing(m == "run", run_dir)
            _block(replicas[m], opts[m], x, 2)
        wall: dict[str, list] = {m: [] for m in MODES}
        cpu: dict[str, list] = {m: [] for m in MODES}
        for i in range(reps):
            for m in (MODES if i % 2 == 0 else MODES[::-1]):
                _tracing(m == "run", run_dir)
                w, c = _block(replicas[m], opts[m], x, steps)
                wall[m].append(w)
                cpu[m].append(c)
        s = bench_capture.paired(wall["plain"], wall["run"], scale=1e-6)
        sc = bench_capture.paired(cpu["plain"], cpu["run"], scale=1e-6)
        results["models"][name] = {
            "desc": desc, "params": sum(p.numel() for p in base.parameters()), "steps_per_block": steps,
            "blocks": reps, "plain_ms": s["plain"], "run_ms": s["traced"], "ratio": s["ratio"],
            "ratio_spread": s["ratio_spread"], "ratio_ci": s["ratio_ci"], "added_ms": s["added"],
            "cpu": {"plain_ms": sc["plain"], "run_ms": sc["traced"], "ratio": sc["ratio"],
                    "ratio_spread": sc["ratio_spread"], "ratio_ci": sc["ratio_ci"]}}
        del replicas, opts, base
    _tracing(False, run_dir)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def _recorded(run_dir: str) -> dict:
    """Ops and compute spans the run blocks wrote (all ranks, all sessions)."""
    import commtrace
    ops = commtrace.load(run_dir)
    spans = commtrace.load(run_dir, table="spans")
    return {"ops": len(ops), "spans": len(spans),
            "span_phases": sorted(str(p) for p in spans["phase"].unique()) if len(spans) else [],
            "ops_with_callsite": int(ops["callsite"].notna().sum()) if "callsite" in ops else 0}


def run(models=bench_ddp.MODELS, reps: int = 41, steps: int = 2) -> dict:
    """{"wrapper", "models": {name: {... "ratio", "ratio_spread", "ratio_ci"}}, "recorded": {...}}."""
    with tempfile.TemporaryDirectory() as d:
        path, run_dir = os.path.join(d, "r.json"), os.path.join(d, "run")
        env_dir = os.environ.pop("COMMTRACE_DIR", None)  # a traced parent must not claim the run
        try:
            mp.spawn(_worker, args=(bench_capture.free_port(), list(models), reps, steps, path, run_dir), nprocs=2)
        finally:
            if env_dir is not None:
                os.environ["COMMTRACE_DIR"] = env_dir
        with open(path) as f:
            res = json.load(f)
        res["recorded"] = _recorded(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
    return res


def print_table(res: dict) -> None:
    print(f"[{res['wrapper']}] recorded: {res['recorded']}")
    print(f"{'model':14} {'plain ms':>9} {'run ms':>9} {'ratio':>7} {'95% CI':>15} {'spread':>13} {'blocks':>9}")
    for name, r in res["models"].items():
        for label, f in ((name, r), (f"{name} CPU", r["cpu"])):
            ci = f["ratio_ci"] or [float("nan")] * 2
            print(f"{label:14} {f['plain_ms']:9.2f} {f['run_ms']:9.2f} {f['ratio']:7.4f} {ci[0]:7.4f}..{ci[1]:<6.4f} "
                  f"{f['ratio_spread'][0]:6.3f}..{f['ratio_spread'][1]:<6.3f} {r['steps_per_block']}x{r['blocks']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(bench_ddp.MODELS))
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = run(args.models.split(","), args.reps, args.steps)
    print_table(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
