"""Under mpirun: a gloo world, one all_reduce, then wait (until the launcher is interrupted)."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
print("ready", dist.get_rank(), flush=True)
time.sleep(120)
