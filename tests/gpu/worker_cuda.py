"""CUDA workloads for tests/gpu (needs a GPU; one GPU is enough).

``worker_cuda.py nccl OUT PORT``: a one-rank NCCL world (NCCL refuses two ranks
on one GPU). Every collective NCCL supports runs once, blocking and async, under
``torch.cuda.set_sync_debug_mode("error")``: a host synchronization added by the
tracer raises. Then DDP (with a BatchNorm buffer) trains a few steps; OUT gets
the results and a hash of the parameters (compared traced vs untraced).

``worker_cuda.py graph OUT PORT``: a one-rank NCCL world whose all_reduce is
captured in a CUDA graph (after a warm-up outside it) and replayed: the tracer
must record no event into the graph being captured.

``worker_cuda.py gloo OUT PORT``: spawns 2 ranks on the same GPU with gloo and
CUDA tensors (gloo completes CUDA work on its own thread).
"""
import hashlib
import json
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MB = 1 << 20


def nccl(out, port):
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    res = {}
    torch.cuda.set_sync_debug_mode("error")  # any host sync below raises
    x = torch.arange(4, dtype=torch.float32, device=dev)
    dist.all_reduce(x)
    big = torch.ones(16 * MB // 4, device=dev)          # 16 MB: long enough to time
    w = dist.all_reduce(big, async_op=True)
    w.wait()
    dist.broadcast(x, 0)
    dist.reduce(x, 0)
    outs = [torch.empty_like(x)]
    dist.all_gather(outs, x)
    flat = torch.empty(4, device=dev)
    dist.all_gather_into_tensor(flat, x)
    rs = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(rs, torch.ones(4, device=dev))
    a2a = torch.empty(4, device=dev)
    dist.all_to_all_single(a2a, torch.full((4,), 2.0, device=dev))
    h = torch.ones(8, dtype=torch.bfloat16, device=dev)
    dist.all_reduce(h, async_op=True).wait()
    torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    res["values"] = {"x": x.tolist(), "big": float(big[0]), "gathered": outs[0].tolist(), "flat": flat.tolist(),
                     "rs": rs.tolist(), "a2a": a2a.tolist(), "h": h.float().tolist()}
    res["params"] = ddp_train(dev)
    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(res, f)


def ddp_train(dev, steps=4):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.BatchNorm1d(256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 8)).to(dev)
    ddp = DDP(model, device_ids=[dev.index], bucket_cap_mb=0.05)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator(device="cpu").manual_seed(1)
    for _ in range(steps):
        xb = torch.randn(32, 64, generator=g).to(dev)
        loss = ddp(xb).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    h = hashlib.sha256()
    for p in model.state_dict().values():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def graph(out, port):
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    x = torch.ones(1024, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (NCCL's communicator)
        x.mul_(2)
        dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        x.mul_(2)
        dist.all_reduce(x)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    # warm-up 2, capture runs nothing, 3 replays x2 each: 2 * 2**3 = 16 (a one-rank sum is the identity)
    res = {"x": float(x[0])}
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(res, f)


def gloo_rank(rank, out, port):
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x = torch.full((1024,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    y = torch.full((MB,), float(rank + 1), device=dev)
    dist.all_reduce(y, async_op=True).wait()
    z = torch.full((8,), float(rank), device=dev)
    dist.broadcast(z, 1)
    torch.cuda.synchronize()
    res = {"x": float(x[0]), "y": float(y[-1]), "z": float(z[0])}
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    mode, out, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "nccl":
        nccl(out, port)
    elif mode == "graph":
        graph(out, port)
    else:
        mp.spawn(gloo_rank, args=(out, port), nprocs=2)
