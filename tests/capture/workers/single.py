"""One-process gloo world (rank 0 of 1) that does N all_reduces, then ends as told.

``single.py PORT MODE [N]``; MODE: ``exit3`` (sys.exit(3)), ``raise`` (uncaught
ValueError from fail()), ``sigkill`` (SIGKILL itself once its N ops are in its ops file),
``sigterm`` (print "ready" and sleep; the test sends SIGTERM), ``osexit``
(os._exit(4) right after the ops, skipping atexit), ``ok``.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def fail(n):
    raise ValueError(f"boom after {n} ops")


def main():
    port, mode = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    for i in range(n):
        dist.all_reduce(torch.ones(i + 1))
    if mode == "exit3":
        sys.exit(3)
    if mode == "raise":
        fail(n)
    if mode == "osexit":
        os._exit(4)
    if mode == "sigkill":
        # once the flush thread has written the n ops (a fixed 1.5 s could be too short on a loaded machine)
        from commtrace.trace.schema import RECORD_SIZE
        ops = os.path.join(os.environ.get("COMMTRACE_DIR", ""), f"rank0.pid{os.getpid()}.ops.bin")
        deadline = time.monotonic() + 40
        while not (os.path.exists(ops) and os.path.getsize(ops) >= n * RECORD_SIZE) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "sigterm":
        print("ready", flush=True)
        time.sleep(60)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
