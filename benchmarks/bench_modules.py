"""The module tracker's cost (capture.module_tracker): per op, and per module call, on and off side by side.

One process, ``commtrace.start()``, a one-rank gloo group (traced). The tracker is
switched on and off between blocks (``ModuleTracker.enable`` / ``disable``), the
mode going first alternating; a block's figure is its mean; we report the median
over blocks of the paired difference (on - off), with its spread (min..max).

* ``op``: one module whose forward calls a 1-element blocking ``all_reduce`` 1000
  times (the module hooks run once per 1000 ops): the added cost per op. The op
  wrappers' hot path does not change with the tracker (it reads the same context
  key); the budget is +0.5 µs per op.
* ``module``: forward and backward of ``Sequential`` of 32 ``Linear(16, 16)`` and
  no communication: the added cost per module call (forward hooks, the two
  multi-grad hooks of backward), and the ratio of the step times.

DDP-only programs never turn the tracker on (no DeviceMesh, no FSDP): their step
ratio is bench_ddp.py's.

    python benchmarks/bench_modules.py [--reps 15] [--calls 1000] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def _blocks(fn_on, fn_off, reps: int) -> tuple[list, list]:
    on, off = [], []
    for i in range(reps):
        order = ((on, fn_on), (off, fn_off)) if i % 2 == 0 else ((off, fn_off), (on, fn_on))
        for acc, fn in order:
            acc.append(fn())
    return on, off


def _summary(on: list, off: list, per: int) -> dict:
    diffs = [(a - b) / per for a, b in zip(on, off)]
    return {"on_us": statistics.median(on) / per, "off_us": statistics.median(off) / per,
            "added_us": statistics.median(diffs), "added_spread": [min(diffs), max(diffs)],
            "ratio": statistics.median(a / b for a, b in zip(on, off))}


def run(reps: int = 15, calls: int = 1000) -> dict:
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import commtrace
    from commtrace.capture import activate

    out = tempfile.mkdtemp(prefix="commtrace-bench-modules-")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29581")
    commtrace.start(os.path.join(out, "run"))
    dist.init_process_group("gloo", rank=0, world_size=1)
    tracker = activate._state["phases"].module_tracker
    t = torch.zeros(1)

    class Talker(nn.Module):
        def forward(self, x):
            for _ in range(calls):
                dist.all_reduce(x)
            return x

    talker = Talker()
    stack = nn.Sequential(*[nn.Linear(16, 16) for _ in range(32)])
    x = torch.randn(8, 16)

    def timed(fn, mode_on: bool, n: int):
        def block():
            (tracker.enable if mode_on else tracker.disable)()
            fn()  # warm (the first call of a mode names modules, interns sigs)
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            return (time.perf_counter_ns() - t0) / n / 1e3   # µs per call of fn
        return block

    def step():
        stack(x).sum().backward()

    with torch.no_grad():
        on, off = _blocks(timed(lambda: talker(t), True, 3), timed(lambda: talker(t), False, 3), reps)
    op = _summary(on, off, calls)
    on, off = _blocks(timed(step, True, 20), timed(step, False, 20), reps)
    module = _summary(on, off, len(stack) + 1)
    module["step_ratio"] = module.pop("ratio")
    tracker.disable()
    dist.destroy_process_group()
    commtrace.stop()
    return {"op": op, "module": module, "calls": calls, "reps": reps, "modules_per_step": len(stack) + 1}


def in_subprocess(reps: int, calls: int = 1000) -> dict:
    """``run`` in a fresh process (it starts tracing and a process group of its own)."""
    import subprocess
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "modules.json")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--reps", str(reps), "--calls", str(calls),
                        "--json", out], check=True, stdout=subprocess.DEVNULL, timeout=900)
        with open(out) as f:
            return json.load(f)


def markdown(res: dict) -> str:
    o, m = res["op"], res["module"]
    rows = [("per op (1-element blocking all_reduce, gloo, 1 rank)", o["off_us"], o["on_us"], o["added_us"],
             o["added_spread"], o["ratio"]),
            (f"per module call ({res['modules_per_step']} x forward + backward, no communication)",
             m["off_us"], m["on_us"], m["added_us"], m["added_spread"], m["step_ratio"])]
    lines = ["| case | off µs | on µs | added µs | spread µs | ratio |", "|---|---|---|---|---|---|"]
    for name, off, on, add, sp, ratio in rows:
        lines.append(f"| {name} | {off:.2f} | {on:.2f} | {add:+.2f} | {sp[0]:+.2f}..{sp[1]:+.2f} | {ratio:.3f} |")
    return ("## Module tracker (bench_modules.py)\n\n"
            "FSDP / FSDP2 / tensor-parallel processes (once a DeviceMesh or an FSDP module exists) name the module "
            "of every op (capture.module_tracker). On and off alternate in blocks, "
            f"{res['reps']} blocks each; medians of the paired differences. The op wrappers' hot path is "
            "unchanged (budget +0.5 µs per op); the cost is per module call, paid by every module of the process "
            "(the ratio row: 33 tiny Linear layers, the worst case). DDP-only processes never turn it on: "
            "their DDP ratio is the DDP section's.\n\n" + "\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    res = run(a.reps, a.calls)
    o, m = res["op"], res["module"]
    print(f"per op:          off {o['off_us']:.2f} µs, on {o['on_us']:.2f} µs, added {o['added_us']:+.3f} µs "
          f"(spread {o['added_spread'][0]:+.3f}..{o['added_spread'][1]:+.3f}), ratio {o['ratio']:.3f}")
    print(f"per module call: added {m['added_us']:+.2f} µs (spread {m['added_spread'][0]:+.2f}.."
          f"{m['added_spread'][1]:+.2f}); step ratio {m['step_ratio']:.3f} "
          f"({res['modules_per_step']} modules, forward + backward, no communication)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
