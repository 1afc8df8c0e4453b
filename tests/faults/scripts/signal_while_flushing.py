"""A one-rank job that is sent a signal while its main thread flushes the trace (as a spawned
rank does at its start; a launcher tearing the job down then, or a user asking for a dump).

usage: signal_while_flushing.py PORT WHERE [SIGNAL [WAKEUP]] -- three all_reduces, then a flush
on the main thread, into which SIGNAL (TERM, the default; INT; USR1) arrives at a chosen point of
TraceWriter.write: WHERE "apply" (before the writer's lock, the flush's lines taken from the
queue) or "dumps" (inside it). Then, TERM: it sleeps (30 s) as a program goes on, the signal
ends it; TERMEXIT: SIGTERM, the program's handler ends it by sys.exit(3); INT: it prints "interrupted" if the flush raised KeyboardInterrupt, and exits; USR1:
it waits (30 s at most) for the dump's line in its trace, prints "dumped", and exits.
WAKEUP ("before" / "after"): the program sets a wakeup fd of its own (as asyncio does), before
importing torch (commtrace's is never set) or after its first ops (it replaces commtrace's).
"""
import os
import signal
import socket
import sys
import time

NAME = sys.argv[3] if len(sys.argv) > 3 else "TERM"
SIG = signal.SIGTERM if NAME == "TERMEXIT" else getattr(signal, "SIG" + NAME)
WAKEUP = sys.argv[4] if len(sys.argv) > 4 else None


def own_wakeup_fd():
    a, b = socket.socketpair()
    a.setblocking(False)
    signal.set_wakeup_fd(a.fileno())
    return a, b


if WAKEUP == "before":
    kept = own_wakeup_fd()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from commtrace.capture.activate import active_recorder  # noqa: E402

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
WHERE = sys.argv[2]
dist.init_process_group("gloo", rank=0, world_size=1)
for _ in range(3):
    dist.all_reduce(torch.ones(4))
if NAME == "TERMEXIT":   # the program's own SIGTERM handler, as training scripts have
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
if WAKEUP == "after":
    kept = own_wakeup_fd()
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
        os.kill(os.getpid(), SIG)


rec = active_recorder()
sys.setprofile(signal_inside_write)
try:
    rec.flush()   # the queued definitions (world, group, sig) and the three ops
except KeyboardInterrupt:
    print("interrupted", flush=True)
sys.setprofile(None)
if SIG == signal.SIGUSR1:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(rec.sink.writer.meta_path) as f:
            if '"type":"dump"' in f.read():
                print("dumped", flush=True)
                break
        time.sleep(0.05)
elif SIG == signal.SIGTERM:
    time.sleep(30)   # the program goes on (its next step): the signal ends it
