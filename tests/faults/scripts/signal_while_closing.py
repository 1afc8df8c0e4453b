"""A one-rank job that is sent a signal while its trace is being closed (a launcher tearing
down a job whose rank is exiting already: mp.spawn after another rank failed; a Ctrl-C).

usage: signal_while_closing.py PORT [SIGNAL [WHERE]] -- three all_reduces, then SIGNAL (TERM,
the default, or INT) arrives inside commtrace's Recorder.close at exit, in the first call that
WHERE makes: "_write_end" (the default: before the end record is queued) or "close" of
TraceWriter (after the end record is written).
"""
import os
import signal
import sys

import torch
import torch.distributed as dist

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
SIG = getattr(signal, "SIG" + (sys.argv[2] if len(sys.argv) > 2 else "TERM"))
WHERE = sys.argv[3] if len(sys.argv) > 3 else "_write_end"
FILE = os.path.join("capture", "recorder.py") if WHERE == "_write_end" else os.path.join("trace", "writer.py")
dist.init_process_group("gloo", rank=0, world_size=1)
for _ in range(3):
    dist.all_reduce(torch.ones(4))
print("ops done", flush=True)


def signal_inside_close(frame, event, arg):
    # Python runs a handler between bytecodes: this one runs inside the function called next.
    if event == "call" and frame.f_back is not None and frame.f_back.f_code.co_name == WHERE \
            and frame.f_back.f_code.co_filename.endswith(FILE):
        sys.setprofile(None)
        os.kill(os.getpid(), SIG)


sys.setprofile(signal_inside_close)
