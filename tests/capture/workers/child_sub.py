"""A plain Python subprocess that joins a 2-rank gloo world (``child_sub.py RANK PORT``)."""
import sys

import torch
import torch.distributed as dist

rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
dist.all_reduce(torch.ones(5))
dist.destroy_process_group()
