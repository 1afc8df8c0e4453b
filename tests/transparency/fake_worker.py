"""c10d's "fake" backend, as PyTorch's tests and dry runs use it: one process plays rank 1 of a
4-rank world (collectives, FSDP2, tensor parallelism), then LocalTensorMode plays all 4 ranks of
a fresh world (all_reduce, scatter), where this torch has it. Prints (JSON) what it computed.
usage: fake_worker.py [--no-fsdp2]  (torch < 2.7's FSDP2 needs CUDA)"""
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

from commtrace import torch_compat

WORLD = 4
out = {}

dist.init_process_group("fake", rank=1, world_size=WORLD, store=FakeStore())
t = torch.ones(2)
dist.all_reduce(t)
gathered = torch.empty(2 * WORLD)
dist.all_gather_into_tensor(gathered, t)
out["dry_run"] = [t.tolist(), gathered.shape[0]]
if "--no-fsdp2" not in sys.argv:
    model = torch_compat.fully_shard()(torch.nn.Linear(4, 4))      # DDP on fake fails untraced (torch 2.13)
    model(torch.randn(2, 4)).sum().backward()
tp = parallelize_module(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)),
                        init_device_mesh("cpu", (WORLD,)), {"0": ColwiseParallel(), "1": RowwiseParallel()})
out["tp"] = list(tp(torch.randn(2, 4)).shape)
dist.destroy_process_group()

try:
    from torch.distributed._local_tensor import LocalTensorMode
except ImportError:   # torch < 2.10
    print(json.dumps(out))
    raise SystemExit(0)
dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
with LocalTensorMode(WORLD):
    x = torch.ones(2)
    dist.all_reduce(x)
    y = torch.empty(2)
    dist.scatter(y, [torch.full((2,), float(r)) for r in range(WORLD)], src=0)
    out["local_tensor"] = [x._local_tensors[0].tolist(), [y._local_tensors[r].tolist() for r in range(WORLD)]]
dist.destroy_process_group()
print(json.dumps(out))
