"""The helpers at the top of tests/ (synthetic.py, tracebuilder.py) importable from every
test directory; appended, so that nothing of tests/ shadows an installed module.

The tests' programs, and this process, see no GPU; tests/gpu give theirs back
(helpers.with_gpus). With one visible, torch itself treats CPU work differently and
fails some of it, untraced too (seen on an H100 with torch 2.11: init_process_group()
with no backend makes an NCCL-only group, so a CPU DeviceMesh's scatter finds no
backend; powerSGD_hook calls torch.cuda.synchronize on the CPU tensors' device)."""
import json
import os
import signal
import sys

import pytest

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

# Files start longest first: under pytest-xdist (make test: -n 2 --dist loadfile) a worker takes
# the next whole file in collection order when it is free, so the long files start first, the
# many short ones fill in behind them, and the run does not end with one long file on one worker
# while the other has nothing left (xdist's own order, most tests first, hands out long files of
# few tests, such as test_compile.py's two compiled DDP runs, late). The order is measured:
# FILE_SECONDS (file_seconds.json) holds each file's seconds (setup + call + teardown of its
# tests summed) in a whole run; a run with COMMTRACE_TEST_FILE_SECONDS=PATH writes them to PATH
# (the files it ran; those of PATH it did not run are kept). A file missing there (a new one)
# runs after the others, in pytest's order. Only the order changes.
FILE_SECONDS = os.path.join(_HERE, "file_seconds.json")
RECORD_FILE_SECONDS = "COMMTRACE_TEST_FILE_SECONDS"


def _read_file_seconds(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            seconds = json.load(f)
    except FileNotFoundError:
        return {}
    return {str(k): float(v) for k, v in seconds.items()}


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):   # pytest-xdist: keep the order set below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    seconds = _read_file_seconds(FILE_SECONDS)
    root = str(config.rootpath)
    # a stable sort: each file's tests stay together and in their order
    items.sort(key=lambda item: -seconds.get(os.path.relpath(str(item.path), root), 0.0))


_ran_seconds: dict = {}   # this run's, per file


def pytest_runtest_logreport(report):
    """Per file, the seconds of its tests' phases (in the controller, xdist's workers' too)."""
    if os.environ.get(RECORD_FILE_SECONDS):
        path = report.nodeid.split("::", 1)[0]
        _ran_seconds[path] = _ran_seconds.get(path, 0.0) + report.duration


def pytest_sessionfinish(session):
    out = os.environ.get(RECORD_FILE_SECONDS)
    if not out or hasattr(session.config, "workerinput"):   # an xdist worker: the controller writes
        return
    seconds = {**_read_file_seconds(out), **_ran_seconds}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}, f, indent=0)
        f.write("\n")


@pytest.fixture(scope="session")
def bounded_ring(tmp_path_factory):
    """``bounded_ring(wrapper)``: the folder of one run of tests/bounded/train.py, 30 steps, 2
    mp.spawn ranks, under ``commtrace run --keep-last 40``, ``wrapper`` ("native" or "python")
    tracing the groups; one per wrapper per test run (helpers.once_per_run): two test files read
    it, tests/bounded/test_bounded.py (the ring) and tests/report/test_partial_report.py
    (analysed in partitions)."""
    import helpers as h
    made = {}

    def make(folder, wrapper):
        d = folder / "run"
        h.run(h.commtrace_cmd(d, "--keep-last", "40", os.path.join(_HERE, "bounded", "train.py"), 30, "spawn", 2,
                              h.free_port()), env=h.wrapper_env(wrapper)).check()
        return str(d)

    def ring(wrapper):
        if wrapper not in made:
            made[wrapper] = h.once_per_run(tmp_path_factory, f"bounded_ring_{wrapper}", lambda f: make(f, wrapper))
        return made[wrapper]
    return ring
