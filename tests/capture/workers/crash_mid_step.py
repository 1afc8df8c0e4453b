"""torchrun, 2 gloo ranks: DDP training where rank 1 raises in step 3 between its
forward and its backward (a bad batch); rank 0 goes on into its backward, launches
the gradient bucket's all_reduce and waits there until torchrun ends it.

usage: torchrun --nproc_per_node 2 crash_mid_step.py
"""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

torch.set_num_threads(1)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 4))                        # 36 floats: one 144 B bucket
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 5):
    opt.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    if step == 3 and rank == 1:
        raise ValueError("bad batch at step 3")
    loss.backward()
    opt.step()
    print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
