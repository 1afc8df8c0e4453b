"""DDP step time, traced / untraced (and optionally under torch.profiler), side by side in one run.

Two gloo ranks (torch.multiprocessing.spawn). Per model, each rank builds
identical DDP replicas over the same real process group: one with
``process_group=<default group>`` (plain), one with
``process_group=<the wrapper commtrace run installs over the same group>`` (traced; real Recorder and
flush thread, no phase hooks), and -- with mode ``profiler`` -- the plain one
run inside ``torch.profiler.profile(record_shapes=True)``. Blocks of steps
alternate between the modes (rotating which goes first); a block's figure is
its mean step time; we report the median over blocks of the per-block ratio
against plain, with the spread (min..max).

Also reported per model: collectives per step and trace bytes per op on disk
(ops.bin + meta.jsonl of the traced replica's run, construction included), and
for the profiler mode the Chrome trace's bytes per collective.

    python benchmarks/bench_ddp.py [--models mlp8,cnn,mlp100m] [--reps 7] [--steps 3] [--profiler] [--json out.json]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_capture  # noqa: E402

MODELS = ("mlp8", "cnn", "mlp100m")


def build(name: str):
    """(module, input batch, description)."""
    torch.manual_seed(0)
    if name == "mlp8":
        layers = []
        for _ in range(8):
            layers += [nn.Linear(1000, 1000), nn.ReLU()]
        return nn.Sequential(*layers), torch.randn(64, 1000), "8 x Linear(1000,1000)+ReLU, batch 64"
    if name == "cnn":
        m = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
            nn.Flatten(), nn.Linear(64 * 16, 10))
        return m, torch.randn(16, 3, 32, 32), "3 x Conv+BatchNorm+ReLU, Linear; batch 16 x 3x32x32"
    if name == "mlp100m":
        layers = []
        for _ in range(4):
            layers += [nn.Linear(5000, 5000), nn.ReLU()]
        return nn.Sequential(*layers), torch.randn(8, 5000), "4 x Linear(5000,5000)+ReLU (100 M params), batch 8"
    if name == "tiny":  # smoke tests
        return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)), torch.randn(4, 16), "tiny MLP"
    raise ValueError(name)


def _step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    opt.step()


def _block(model, opt, x, steps: int, prof: bool) -> float:
    """Mean ns per step over ``steps`` steps (profiler entered/left outside the timing)."""
    if prof:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
            t0 = time.perf_counter_ns()
            for _ in range(steps):
                _step(model, opt, x)
            return (time.perf_counter_ns() - t0) / steps
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        _step(model, opt, x)
    return (time.perf_counter_ns() - t0) / steps


def _dir_bytes(d: str) -> dict:
    ops = meta = 0
    for f in os.listdir(d):
        p = os.path.join(d, f)
        if f.endswith(".ops.bin"):
            ops += os.path.getsize(p)
        elif f.endswith(".meta.jsonl"):
            meta += os.path.getsize(p)
    return {"ops_bin": ops, "meta_jsonl": meta}


def profiler_trace_size(model, opt, x, steps: int, export: bool = True) -> dict | None:
    """Run ``steps`` steps under torch.profiler(record_shapes=True), export the Chrome trace, measure it.

    Every rank must call this (the steps are collective); only ``export`` ranks write and measure."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        for _ in range(steps):
            _step(model, opt, x)
    if not export:
        return None
    d = tempfile.mkdtemp(prefix="ct-prof-")
    try:
        path = os.path.join(d, "trace.json")
        t0 = time.perf_counter()
        p.export_chrome_trace(path)
        export_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    coll = [e for e in events if str(e.get("name", "")).startswith(("gloo:", "mpi:", "nccl:"))]
    comms = [e for e in events if e.get("name") == "record_param_comms"]
    n = len(coll) or len(comms)
    coll_bytes = sum(len(json.dumps(e)) for e in coll + comms)
    return {"trace_bytes": size, "events": len(events), "collectives": n,
            "bytes_per_collective": size / n if n else None,
            "collective_event_bytes_per_collective": coll_bytes / n if n else None,
            "export_s": export_s}


def _worker(rank, port, models, modes, reps, steps, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    plain_pg = dist.distributed_c10d._get_default_group()
    results = {}
    for name in models:
        d = tempfile.mkdtemp(prefix="ct-ddp-")
        try:
            traced_pg, rec = bench_capture.make_traced(plain_pg, d, "gloo")
            base, x, desc = build(name)
            nparams = sum(p.numel() for p in base.parameters())
            m_plain = DDP(copy.deepcopy(base), process_group=plain_pg)
            m_traced = DDP(base, process_group=traced_pg)
            runs = {"plain": (m_plain, False), "traced": (m_traced, False), "profiler": (m_plain, True)}
            opts = {m: torch.optim.SGD(runs[m][0].parameters(), lr=1e-4) for m in modes}
            for m in modes:  # warm-up: DDP's first iterations (bucket rebuild) and interning
                _block(runs[m][0], opts[m], x, 2, False)
            rec.flush()
            ops0 = rec.sink.writer.records_written
            traced_steps = 0
            times: dict[str, list] = {m: [] for m in modes}
            for i in range(reps):
                order = modes[i % len(modes):] + modes[:i % len(modes)]
                for m in order:
                    model, prof = runs[m]
                    times[m].append(_block(model, opts[m], x, steps, prof))
                    if m == "traced":
                        traced_steps += steps
            rec.flush()
            ops_per_step = (rec.sink.writer.records_written - ops0) / max(traced_steps, 1)
            prof_size = None
            if "profiler" in modes:
                prof_size = profiler_trace_size(m_plain, opts["profiler"], x, steps, export=rank == 0)
            dist.barrier()
            rec.close()
            total_ops = rec.sink.writer.records_written
            size = _dir_bytes(d)
            entry = {"desc": desc, "params": nparams, "steps_per_block": steps, "blocks": reps,
                     "plain_ms": statistics.median(times["plain"]) / 1e6,
                     "collectives_per_step": ops_per_step, "trace_ops": total_ops, **size,
                     "bytes_per_op": (size["ops_bin"] + size["meta_jsonl"]) / max(total_ops, 1),
                     "ops_bin_bytes_per_op": size["ops_bin"] / max(total_ops, 1)}
            for m in modes:
                if m == "plain":
                    continue
                s = bench_capture.paired(times["plain"], times[m], scale=1e-6)
                entry[m] = {"ms": s["traced"], "ratio": s["ratio"], "ratio_spread": s["ratio_spread"],
                            "added_ms": s["added"]}
            if prof_size:
                entry["profiler_trace"] = prof_size
            results[name] = entry
            del m_plain, m_traced, runs, opts, base
        finally:
            shutil.rmtree(d, ignore_errors=True)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def run(models=MODELS, modes=("plain", "traced"), reps: int = 7, steps: int = 3) -> dict:
    modes = list(modes)
    assert modes[0] == "plain"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        mp.spawn(_worker, args=(bench_capture.free_port(), list(models), modes, reps, steps, path), nprocs=2)
        with open(path) as f:
            return json.load(f)


def print_table(res: dict) -> None:
    print(f"{'model':10} {'params':>10} {'plain ms':>9} {'traced ms':>10} {'ratio':>7} {'spread':>13} "
          f"{'prof ratio':>10} {'coll/step':>9} {'B/op':>7}")
    for name, r in res.items():
        t = r.get("traced", {})
        p = r.get("profiler")
        sp = f"{t['ratio_spread'][0]:.3f}..{t['ratio_spread'][1]:.3f}" if t else ""
        print(f"{name:10} {r['params']:10d} {r['plain_ms']:9.2f} {t.get('ms', float('nan')):10.2f} "
              f"{t.get('ratio', float('nan')):7.3f} {sp:>13} {p['ratio'] if p else float('nan'):10.3f} "
              f"{r['collectives_per_step']:9.1f} {r['bytes_per_op']:7.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--profiler", action="store_true", help="add a torch.profiler(record_shapes=True) mode")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    modes = ["plain", "traced"] + (["profiler"] if args.profiler else [])
    res = run(args.models.split(","), modes, args.reps, args.steps)
    print_table(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
