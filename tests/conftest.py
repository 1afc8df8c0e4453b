"""The helpers at the top of tests/ (synthetic.py, tracebuilder.py) importable from every
test directory; appended, so that nothing of tests/ shadows an installed module.

The tests' programs, and this process, see no GPU; tests/gpu give theirs back
(helpers.with_gpus). With one visible, torch itself treats CPU work differently and
fails some of it, untraced too (seen on an H100 with torch 2.11: init_process_group()
with no backend makes an NCCL-only group, so a CPU DeviceMesh's scatter finds no
backend; powerSGD_hook calls torch.cuda.synchronize on the CPU tensors' device)."""
import os
import signal
import sys

# A run started as a background job of a non-interactive shell (``make test &``, a script or a
# tool that runs it) inherits SIGINT ignored; Python then never makes it a KeyboardInterrupt, so
# Ctrl-C or ``kill -INT`` did nothing, for the run and for its children (they inherit it too).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

os.environ.setdefault("COMMTRACE_TEST_GPUS", os.environ.get("CUDA_VISIBLE_DEVICES", "*"))
os.environ["CUDA_VISIBLE_DEVICES"] = ""

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)
