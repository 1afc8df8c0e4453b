"""Under torchrun: env:// gloo world, one all_reduce of 4 floats; writes OUT.rank<R>."""
import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
r = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
with open(f"{sys.argv[1]}.rank{r}", "w") as f:
    json.dump({"backend": dist.get_backend(), "world": dist.get_world_size(), "sum": t[0].item(),
               "local_rank": os.environ.get("LOCAL_RANK")}, f)
dist.destroy_process_group()
