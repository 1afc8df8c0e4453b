"""DDP + ZeroRedundancyOptimizer(overlap_with_ddp=True) under mpirun on the mpi backend
(torch refuses the overlap on gloo). usage: zero_overlap.py [install]

Two models one after another, each in ``commtrace.region(<hook>)``: 5 iterations under
``hook_with_zero_step``, then 4 under ``hook_with_zero_step_interleaved``. No ``step()``
call: the hook steps the optimizer once DDP's buckets are rebuilt (from iteration 3).
Model: 6 x Linear(16, 16) (272 floats = 1088 B each), bucket_cap_mb of 2200 B: after
the rebuild 3 buckets, 2240, 3200 and 1088 B; ZeRO assigns them to ranks 0, 1, 0.
Prints each iteration's loss and the bucket assignment (``install``: untraced, with
commtrace.mpi.install() providing the backend).
"""
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import ddp_zero_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

if sys.argv[1:] == ["install"]:
    import commtrace.mpi
    commtrace.mpi.install()
import commtrace  # noqa: E402

ITERATIONS = {"hook_with_zero_step": 5, "hook_with_zero_step_interleaved": 4}

dist.init_process_group("mpi")
rank = dist.get_rank()
for name, iterations in ITERATIONS.items():
    with commtrace.region(name):
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(6)]), bucket_cap_mb=2200 / 2**20)
        zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD,
                                       overlap_with_ddp=True, lr=0.01)
        model.register_comm_hook(None, getattr(ddp_zero_hook, name)(default_hooks.allreduce_hook, model, zero))
        for i in range(iterations):
            zero.zero_grad()
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(i * 10 + rank))
            loss = model(x).pow(2).sum()
            loss.backward()
            print(f"{name} rank {rank} iteration {i} loss {loss.item():.6f}", flush=True)
        print(f"{name} rank {rank} buckets owned by {zero._overlap_info.assigned_ranks_per_bucket}", flush=True)
dist.destroy_process_group()
