"""Rank 0 of a 2-rank world whose rank 1 never comes: blocked inside init_process_group (C++).

usage: blocked_in_init.py PORT READY_FILE -- writes READY_FILE, then waits (up to 60 s).
"""
import datetime
import os
import sys

import torch.distributed as dist

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
open(sys.argv[2], "w").close()
dist.init_process_group("gloo", rank=0, world_size=2, timeout=datetime.timedelta(seconds=60))
