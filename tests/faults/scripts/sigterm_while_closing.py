"""A one-rank job that is sent SIGTERM while its trace is being closed (a launcher tearing
down a job whose rank is exiting already: mp.spawn after another rank failed).

usage: sigterm_while_closing.py PORT -- three all_reduces, then the signal arrives inside
commtrace's Recorder.close at exit, at a chosen point: the first call that close makes.
"""
import os
import signal
import sys

import torch
import torch.distributed as dist

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
for _ in range(3):
    dist.all_reduce(torch.ones(4))
print("ops done", flush=True)


def signal_inside_close(frame, event, arg):
    # Python runs a handler between bytecodes: this one runs inside the function called next.
    if event == "call" and frame.f_back is not None and frame.f_back.f_code.co_name == "close" \
            and frame.f_back.f_code.co_filename.endswith(os.path.join("capture", "recorder.py")):
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)


sys.setprofile(signal_inside_close)
