import json, os, statistics, sys, tempfile, time
import torch, torch.distributed as dist
sys.path.insert(0, "benchmarks")
from bench_capture import free_port, make_traced
from bench_cuda import _Forwarder
from torch.nn.parallel import DistributedDataParallel as DDP
from commtrace.capture import native_wrapper
dev = torch.device("cuda:0"); torch.cuda.set_device(dev)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
plain = dist.distributed_c10d._get_default_group()
calls = {"n": 0, "t": 0}
orig = native_wrapper._lookup
def counting(*a, **k):
    t = time.perf_counter_ns(); r = orig(*a, **k); calls["n"] += 1; calls["t"] += time.perf_counter_ns() - t; return r
native_wrapper._lookup = counting
import commtrace.capture.wrapper as W
W._lookup = counting
nat, rec1 = make_traced(plain, tempfile.mkdtemp(), "nccl")
py, rec2 = make_traced(plain, tempfile.mkdtemp(), "nccl", "python")
fw = _Forwarder(plain)
print("kinds", type(nat).__name__, type(py).__name__, flush=True)
x = torch.randn(256, 1024, device=dev)
def mk(pg, cap):
    torch.manual_seed(0)
    layers = [m for _ in range(8) for m in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())]
    m = DDP(torch.nn.Sequential(*layers).to(dev), device_ids=[0], process_group=pg, bucket_cap_mb=cap)
    return m, torch.optim.SGD(m.parameters(), lr=1e-3)
def steps(m, opt, n, sync=True):
    torch.cuda.synchronize(); t0 = time.perf_counter_ns()
    for _ in range(n):
        opt.zero_grad(); m(x).square().mean().backward(); opt.step()
    host = (time.perf_counter_ns() - t0) / n / 1e3
    torch.cuda.synchronize(); return ((time.perf_counter_ns() - t0) / n / 1e3) if sync else host
out = {}
for cap in (25, 1):
    V = {"plain": mk(plain, cap), "native": mk(nat, cap), "python": mk(py, cap), "forwarder": mk(fw, cap)}
    for v in V.values(): steps(*v, 5)
    c0 = calls["n"]; t0c = calls["t"]
    res = {k: [] for k in V}; host = {k: [] for k in V}
    for r in range(9):
        for k, v in V.items():
            res[k].append(steps(*v, 20))
            host[k].append(steps(*v, 20, sync=False))
    med = {k: statistics.median(v) for k, v in res.items()}
    hmed = {k: statistics.median(v) for k, v in host.items()}
    out[f"cap{cap}"] = {"step_us": med, "host_us": hmed, "ratio": {k: med[k] / med["plain"] for k in med},
                        "lookups_steady": calls["n"] - c0, "lookup_us": (calls["t"] - t0c) / 1e3,
                        "steps_measured": 9 * 40 * 4}
    print(cap, json.dumps(out[f"cap{cap}"], indent=1), flush=True)
n = len(rec1.native_log.drain(True)) if rec1.native_log is not None else -1
print("native log bytes drained", n)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "ddp_probe.json"), "w"))
