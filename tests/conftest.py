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

# The files that took longest (setup + call + teardown summed per file, those over 20 s) in a
# run of this suite with two workers on 2026-11-29 (BENCHMARKS.md, "Test time: longest files
# first"; stopped at 631 of 895 tests: files it did not reach are not here), longest first; the
# files whose workers now fork their ranks (BENCHMARKS.md, "Test time: forked ranks") moved down
# by their measured CPU ratio (after / before), those with no duration there placed by their
# rank in that run (test_debug_detail.py fell under 20 s). With pytest-xdist (make test: -n 2
# --dist loadfile) files go to the workers in collection order, so these start first and the
# many short files fill in behind them, and the run does not end with one long file on one
# worker while the other has nothing left (xdist's own order, most tests first, hands out long
# files with few tests, such as test_compile.py's two compiled DDP runs, late).
# Only the order changes; a file missing here runs after these, in pytest's order.
LONGEST_FIRST = (
    "tests/mpi/test_mpi_backend.py", "tests/examples/test_examples.py", "tests/bench/test_bench_smoke.py",
    "tests/bounded/test_bounded.py", "tests/api/test_python_api.py", "tests/capture/test_parallel_modules.py",
    "tests/mpi/test_native_mpi.py", "tests/faults/test_worlds.py", "tests/trainers/test_trainers.py",
    "tests/capture/test_compile.py", "tests/report/test_partial_report.py", "tests/capture/test_ops.py",
    "tests/capture/test_children.py", "tests/report/test_worlds.py", "tests/test_patch.py",
    "tests/faults/test_harness_skip.py", "tests/report/test_html.py", "tests/mpi/test_torch_suite_mpi.py",
    "tests/capture/test_p2p.py", "tests/capture/test_run_dir.py", "tests/faults/test_check_fold.py",
    "tests/capture/test_torch_suite.py", "tests/capture/test_ddp.py", "tests/analysis/test_rank_pieces.py",
    "tests/report/test_ddp_variants.py", "tests/capture/test_pipeline.py", "tests/capture/test_process.py",
    "tests/capture/test_fsdp.py", "tests/clock/test_hosts.py", "tests/capture/test_sparse.py",
    "tests/bench/test_flight_recorder.py", "tests/capture/test_blocking_calls.py",
    "tests/capture/test_crash_mid_step.py", "tests/capture/test_side_thread.py",
    "tests/capture/test_torch_plumbing.py", "tests/capture/test_hsdp.py", "tests/capture/test_checkpoint.py",
    "tests/capture/test_zero_overlap.py",
)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):   # pytest-xdist: keep the order set below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    place = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = str(config.rootpath)
    # a stable sort: each file's tests stay together and in their order
    items.sort(key=lambda item: place.get(os.path.relpath(str(item.path), root), len(place)))


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
