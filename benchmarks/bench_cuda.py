"""Tracer cost on CUDA tensors with NCCL, plain vs traced, side by side in one run.

Needs a CUDA GPU (one is enough: a one-rank NCCL world); prints "not available"
otherwise. The same real NCCL group is called directly (plain) and through a
traced wrapper `commtrace run` installs (native when built) with a real Recorder and flush thread (traced), alternating
in blocks as in bench_capture.py.

* "issue cost": time for ``allreduce`` to return. NCCL never blocks the host, so
  this is all the caller pays; traced includes recording the op's CUDA end event.
* "DDP step": an 8-layer MLP (1024 wide) under DDP, traced/untraced step time,
  each step ending in ``torch.cuda.synchronize()``. "forwarder" is DDP over a
  bare Python ProcessGroup that only forwards each call: the floor of any
  Python-level wrapper (DDP calls it from the autograd thread, through pybind).

    python benchmarks/bench_cuda.py [--reps 9] [--calls 400] [--wrapper auto|python] [--json out.json]
                                    [--ddp-reps N] [--ddp-only]

A DDP block is 40 steps (~0.1 s on an H100), so many blocks are cheap: a 1-2 %
effect needs them, because a busy host moves step time by several % between blocks.

The first line printed names the card, the torch and the wrapper measured.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_capture import alternate, free_port, make_traced, wrapper_kind  # noqa: E402


def _issue(pg, t, opts, n: int) -> float:
    now = time.perf_counter_ns
    s = []
    for _ in range(n):
        t0 = now()
        pg.allreduce([t], opts)
        s.append(now() - t0)
    torch.cuda.synchronize()
    return statistics.median(s)


class _Forwarder(dist.ProcessGroup):
    def __init__(self, inner):
        super().__init__(inner.rank(), inner.size())
        self._inner = inner
        for dev in inner._device_types:
            self._register_backend(dev, dist.ProcessGroup.BackendType.NCCL, inner._get_backend(dev))

    def getBackendName(self):
        return self._inner.name()


def _forward(name):
    def method(self, *a, **k):
        return getattr(self._inner, name)(*a, **k)
    return method


for _name in ("allreduce", "broadcast", "allgather", "_allgather_base"):
    setattr(_Forwarder, _name, _forward(_name))


def _ddp_steps(model, opt, x, steps: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--json")
    ap.add_argument("--ddp-reps", type=int, help="blocks per DDP case (default: --reps)")
    ap.add_argument("--ddp-only", action="store_true", help="skip the issue-cost cases")
    ap.add_argument("--wrapper", choices=("auto", "python"), default="auto",
                    help="auto: the wrapper `commtrace run` gives an NCCL group (native when built); "
                         "python: the Python wrapper")
    a = ap.parse_args(argv)
    if not (torch.cuda.is_available() and dist.is_nccl_available()):
        print("[cuda] not available: needs a CUDA GPU and NCCL")
        return 0
    from torch.nn.parallel import DistributedDataParallel as DDP
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    port = os.environ.get("MASTER_PORT") or free_port()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    plain = dist.distributed_c10d._get_default_group()
    d = tempfile.mkdtemp(prefix="ct-bench-")
    res = {}
    try:
        traced, rec = make_traced(plain, d, "nccl", a.wrapper)
        kind = "python" if a.wrapper == "python" else wrapper_kind(plain)
        for label, n in () if a.ddp_only else (("1 elem", 1), ("4 MB", 1 << 20)):
            t = torch.ones(n, device=dev)
            o = dist.AllreduceOptions()
            res[f"issue cost: all_reduce {label}"] = alternate(
                lambda: _issue(plain, t, o, a.calls), lambda: _issue(traced, t, o, a.calls), a.reps)
        x = torch.randn(256, 1024, device=dev)
        models = {}
        for name, pg in (("plain", plain), ("traced", traced), ("forwarder", _Forwarder(plain))):
            torch.manual_seed(0)
            layers = [m for _ in range(8) for m in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())]
            m = DDP(torch.nn.Sequential(*layers).to(dev), device_ids=[0], process_group=pg)
            models[name] = (m, torch.optim.SGD(m.parameters(), lr=1e-3))
        res["DDP step: mlp8 (1024 wide)"] = alternate(lambda: _ddp_steps(*models["plain"], x, 40),
                                                      lambda: _ddp_steps(*models["traced"], x, 40), a.ddp_reps or a.reps)
        res["DDP step: mlp8, bare forwarder"] = alternate(lambda: _ddp_steps(*models["plain"], x, 40),
                                                          lambda: _ddp_steps(*models["forwarder"], x, 40), a.ddp_reps or a.reps)
        rec.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    dist.destroy_process_group()
    print(f"[cuda] {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {kind} wrapper")
    print(f"{'case':36s} {'plain µs':>10s} {'traced µs':>10s} {'added µs':>9s} {'ratio':>7s} {'ratio 95% CI':>15s} blocks")
    for k, r in res.items():
        ci = "-" if not r["ratio_ci"] else f"{r['ratio_ci'][0]:.3f}-{r['ratio_ci'][1]:.3f}"
        print(f"{k:36s} {r['plain']:10.2f} {r['traced']:10.2f} {r['added']:9.2f} {r['ratio']:7.3f} {ci:>15s} {r['blocks']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "wrapper": kind,
                       "cases": res}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
