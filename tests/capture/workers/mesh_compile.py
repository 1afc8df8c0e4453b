"""torch.compile in a process with a DeviceMesh (the module tracker is on): one rank, gloo.

``mesh_compile.py PORT OUT``: a compiled MLP, 2 steps of forward/backward and an
all_reduce of a gradient; writes the outputs and Dynamo's graph-break count to OUT.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main(port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh
    init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    cm = torch.compile(m, backend="eager")
    x = torch.randn(4, 8)
    sums = []
    for _ in range(2):
        out_t = cm(x)
        out_t.sum().backward()
        dist.all_reduce(m[0].weight.grad)
        sums.append(float(out_t.sum()))
    import torch._dynamo.utils as du
    breaks = sum(du.counters["graph_break"].values()) if "graph_break" in du.counters else 0
    with open(out, "w") as f:
        json.dump({"sums": sums, "grad": m[0].weight.grad.tolist(), "graph_breaks": breaks}, f)
    dist.destroy_process_group()
    # see Recorder.EXIT_SETTLE_S: gloo may still drop a Work at exit (CI: the untraced run
    # aborted once in finalization, "terminate called without an active exception")
    time.sleep(0.05)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
