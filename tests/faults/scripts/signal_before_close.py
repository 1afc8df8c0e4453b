"""A one-rank job traced by ``commtrace.start()`` (after ``import torch``: the close at exit is
the last atexit call registered before the program's own), whose last atexit call sends the
process SIGINT from C (ctypes: no bytecode runs after it, so Python runs no handler there). The
program's SIGINT handler (KeyboardInterrupt) then runs at the first line of the next atexit call,
commtrace's close at exit: before the close holds SIGINT (``sigview.deferred``).

usage: signal_before_close.py RUN_DIR PORT -- three all_reduces, then the exit.
"""
import atexit
import ctypes
import os
import signal
import sys

import torch
import torch.distributed as dist

import commtrace

commtrace.start(sys.argv[1])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0, world_size=1)
for _ in range(3):
    dist.all_reduce(torch.ones(4))
print("ops done", flush=True)
atexit.register(ctypes.CDLL(None).kill, os.getpid(), int(signal.SIGINT))
