"""commtrace vs what users already have: torch's Flight Recorder and torch.profiler, side by side in one run.

Two gloo ranks (torch.multiprocessing.spawn). Four modes over the same real
process group, alternating in blocks (rotating which goes first):
  fr off    the group called directly, Flight Recorder off (as TORCH_FR_BUFFER_SIZE=0)
  plain     the group called directly, Flight Recorder on (torch's default)
  profiler  plain inside torch.profiler.profile(activities=[CPU], record_shapes=True)
            (entered/left outside timing)
  traced    the group called through the traced wrapper `commtrace run` installs
            (native when built; real Recorder), Flight Recorder on
The Flight Recorder is one object per process, configured once when the first
gloo group is built, so "off" is switched inside the process
(flight_recorder.py says how and why); where that is not possible the mode is
left out and the reason reported.

Cases: the issue cost (time for all_reduce(1 elem, async_op=True) to return),
the blocking 1-element all_reduce, and the caller's CPU time per blocking call.
Figures: median over blocks of the paired difference, with the spread and a
95 % interval of the median (intervals.py): Flight Recorder = plain - fr off;
torch.profiler = profiler - plain; commtrace = traced - plain (what tracing
adds for a user who has the Flight Recorder on, as by default); and
"commtrace - FR" = the per-block (traced - plain) - (plain - fr off).
The DDP step-time overhead and the profiler's trace size per collective come
from ``bench_ddp.py --profiler``.

    python benchmarks/bench_profiler.py [--reps 41] [--calls 400] [--json out.json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_capture  # noqa: E402
import flight_recorder  # noqa: E402
from intervals import median_ci  # noqa: E402

MODES = ("fr off", "plain", "profiler", "traced")
CASES = ("issue cost: all_reduce 1 elem async", "all_reduce 1 elem", "caller CPU: all_reduce 1 elem")


def _prof():
    from torch.profiler import ProfilerActivity, profile
    return profile(activities=[ProfilerActivity.CPU], record_shapes=True)


@contextlib.contextmanager
def _fr_off(switch):
    switch.off()
    try:
        yield
    finally:
        switch.on()


def _context(mode: str, switch):
    if mode == "profiler":
        return _prof()
    if mode == "fr off":
        return _fr_off(switch)
    return contextlib.nullcontext()


def summarize(times: dict) -> dict:
    """Per case: paired summaries (µs) of each mode against the mode below it."""
    out = {"profiler": bench_capture.paired(times["plain"], times["profiler"]),
           "traced": bench_capture.paired(times["plain"], times["traced"])}
    if "fr off" in times:
        off, plain, traced = times["fr off"], times["plain"], times["traced"]
        out["flight_recorder"] = bench_capture.paired(off, plain)
        excess = [((t - p) - (p - o)) * 1e-3 for o, p, t in zip(off, plain, traced)]
        out["traced_minus_fr"] = {"median": statistics.median(excess), "ci": median_ci(excess),
                                  "spread": [min(excess), max(excess)]}
    return out


def _worker(rank, port, calls, reps, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # "plain" is the Flight Recorder on as torch 2.13 ships it (2000 entries); some releases
    # (2.8) ship it off, so it is asked for where the environment says nothing.
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    plain = dist.distributed_c10d._get_default_group()
    try:
        switch, fr = flight_recorder.FlightRecorderSwitch(), {"available": True, "reason": None}
    except flight_recorder.Unavailable as e:
        switch, fr = None, {"available": False, "reason": str(e)}
    modes = [m for m in MODES if switch is not None or m != "fr off"]
    d = tempfile.mkdtemp(prefix="ct-prof-")
    cases = {}
    try:
        traced, rec = bench_capture.make_traced(plain, d, "gloo")
        fr["wrapper"] = bench_capture.wrapper_kind(plain)
        fns = bench_capture.case_fns(calls, CASES)
        groups = {"fr off": plain, "plain": plain, "profiler": plain, "traced": traced}
        for name, fn in fns.items():
            for m in modes:  # warm-up
                with _context(m, switch):
                    fn(groups[m])
            times = {m: [] for m in modes}
            for i in range(reps):
                k = i % len(modes)
                for m in modes[k:] + modes[:k]:
                    with _context(m, switch):
                        times[m].append(fn(groups[m]))
            cases[name] = summarize(times)
        rec.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"flight_recorder": fr, "cases": cases}, f)
    dist.barrier()
    dist.destroy_process_group()


def run(calls: int = 400, reps: int = 41) -> dict:
    """{"flight_recorder": {"available", "reason", "wrapper"}, "cases": {case: summarize(...)}}."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        mp.spawn(_worker, args=(bench_capture.free_port(), calls, reps, path), nprocs=2)
        with open(path) as f:
            return json.load(f)


def _fmt(r: dict | None) -> str:
    if not r:
        return f"{'n/a':>24}"
    ci = r.get("added_ci") or [float("nan")] * 2
    return f"{r['added']:+8.2f} [{ci[0]:+6.2f},{ci[1]:+6.2f}]"


def print_table(res: dict) -> None:
    fr = res["flight_recorder"]
    if not fr["available"]:
        print(f"Flight Recorder off: not available ({fr['reason']})")
    print(f"{'case':38} {'plain µs':>9} {'+FR µs [95% CI]':>24} {'+commtrace µs [95% CI]':>24} "
          f"{'+profiler µs [95% CI]':>24}")
    for name, r in res["cases"].items():
        print(f"{name:38} {r['traced']['plain']:9.2f} {_fmt(r.get('flight_recorder'))} {_fmt(r['traced'])} "
              f"{_fmt(r['profiler'])}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = run(args.calls, args.reps)
    print_table(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
