"""A one-rank gloo job that dies by a fatal signal right after its last op, or lives on.

usage: fatal_after_ops.py PORT MODE -- five all_reduces, then MODE:
  abort    os.abort() (SIGABRT, the main thread holding the GIL)
  mpi      the same on the mpi backend (under mpirun: Open MPI's own SIGABRT handler, set at
           MPI_Init, prints its stack trace)
  segv     reads address 0 (SIGSEGV in C code called with the GIL held)
  handled  the program's own Python handlers: SIGABRT's set before init_process_group,
           SIGBUS's after; it sends itself both, goes on with two more all_reduces, exits 0
  fork     a forked child aborts (its own trace ends by the signal); the parent waits for
           it, does two more all_reduces and exits 0
"""
import ctypes
import os
import signal
import sys

import torch
import torch.distributed as dist

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
MODE = sys.argv[2]
handled = []


def handler(signum, frame):
    handled.append(signum)


if MODE == "handled":
    signal.signal(signal.SIGABRT, handler)
if MODE == "mpi":
    dist.init_process_group("mpi")
else:
    dist.init_process_group("gloo", rank=0, world_size=1)
if MODE == "handled":
    signal.signal(signal.SIGBUS, handler)
t = torch.ones(4)
for _ in range(5):
    dist.all_reduce(t)
if MODE in ("abort", "mpi"):
    os.abort()
if MODE == "segv":
    ctypes.string_at(0)
if MODE == "handled":
    os.kill(os.getpid(), signal.SIGABRT)
    os.kill(os.getpid(), signal.SIGBUS)
    print("handled", *sorted(handled), flush=True)
if MODE == "fork":
    pid = os.fork()
    if pid == 0:
        os.abort()
    _, status = os.waitpid(pid, 0)
    print("parent", os.getpid(), "child killed by", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, flush=True)
for _ in range(2):
    dist.all_reduce(t)
dist.destroy_process_group()
