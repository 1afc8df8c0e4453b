"""A one-rank job that handles SIGTERM itself for a while, then puts the handler it found back.

usage: own_term_handler.py PORT -- prints "handled N" and exits 0.
Each round signals itself, waits for its handler without giving up the GIL, and restores the
old handler at once: commtrace's signal thread reads the delivery only afterwards.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
dist.all_reduce(torch.ones(1))
got = []
for _ in range(20):
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    n = len(got)
    os.kill(os.getpid(), signal.SIGTERM)
    while len(got) == n:
        pass
    signal.signal(signal.SIGTERM, old)
    time.sleep(0.05)
time.sleep(0.5)   # time for the signal thread to act, were it to
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
print("handled", len(got))
