"""A one-rank job that is sent SIGTERM while its main thread flushes the trace (as a spawned
rank does at its start; a launcher tearing the job down then).

usage: sigterm_while_flushing.py PORT WHERE -- three all_reduces, then a flush on the main
thread, into which the signal arrives at a chosen point of TraceWriter.write: WHERE "apply"
(before the writer's lock, the flush's lines taken from the queue) or "dumps" (inside it);
then it sleeps (30 s) as a program goes on.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from commtrace.capture.activate import active_recorder

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
WHERE = sys.argv[2]
dist.init_process_group("gloo", rank=0, world_size=1)
for _ in range(3):
    dist.all_reduce(torch.ones(4))
print("ops done", flush=True)


def in_trace_writer(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "write" and frame.f_code.co_filename.endswith(os.path.join("trace", "writer.py")):
            return True
        frame = frame.f_back
    return False


def signal_inside_write(frame, event, arg):
    # Python runs a handler between bytecodes: this one runs inside the function called here.
    if event == "call" and frame.f_code.co_name == WHERE and in_trace_writer(frame.f_back):
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)


sys.setprofile(signal_inside_write)
active_recorder().flush()   # the queued definitions (world, group, sig) and the three ops
sys.setprofile(None)
time.sleep(30)   # the program goes on (its next step): the signal ends it
