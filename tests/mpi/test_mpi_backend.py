"""mpi backend (commtrace.mpi) under mpirun with 2 and 3 ranks, against gloo."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not (Path(sys.executable).parent / "mpirun").exists(),
    reason="needs mpi4py and mpirun next to sys.executable")


def _gloo_lacks_an_op() -> str | None:
    sys.path.insert(0, str(ROOT / "tests"))
    import helpers
    return helpers.gloo_lacks_an_op()


EXAMPLE_ARGS = ("--hidden", "200", "--epochs", "1", "--samples", "128")   # examples/ddp_mpi.py, small
# worker_lifetime at MPI_THREAD_MULTIPLE, the level workers.py initializes MPI at (commtrace's):
# it shares the 3-rank launch; below it ("serialized") the level is the launch's own
LIFETIME_SHARED = ("multiple", "100")


def _shared(run_mpi_shared, n: int, worker: str) -> str:
    """The output of the one launch on ``n`` ranks that runs this file's untraced workers whose
    subject is what they check, not their launch (conftest.run_mpi_shared)."""
    jobs = [["worker_ops.py"]] if not _gloo_lacks_an_op() else []
    jobs += [["worker_ddp.py"]]
    jobs += [["worker_order.py", "10"], ["worker_mixed.py", "ops", "join"], ["worker_compiled.py"],
             ["run_with_install.py", ROOT / "examples" / "ddp_mpi.py", *EXAMPLE_ARGS]] if n == 2 else \
        [["worker_anysource.py"], ["worker_profiler.py"], ["worker_lifetime.py", *LIFETIME_SHARED]]
    return run_mpi_shared(n, jobs, worker)


@pytest.mark.parametrize("n", [2, 3])
def test_every_op_and_dtype_matches_gloo(run_mpi_shared, n):
    why = _gloo_lacks_an_op()
    if why:  # the reference (torch 2.4's gloo also has no AVG and sums whatever op reduce_scatter_tensor gets)
        pytest.skip(f"gloo is no reference for every op on this torch: {why}")
    out = _shared(run_mpi_shared, n, "worker_ops.py")
    assert any(line.startswith("mpi-vs-gloo: ") and line.endswith(f"on {n} ranks, 0 failures")
               for line in out.splitlines()), out


@pytest.mark.parametrize("n", [2, 3])
def test_ddp_losses_match_gloo(run_mpi_shared, n):
    out = _shared(run_mpi_shared, n, "worker_ddp.py")
    assert any(line.startswith("ddp gloo-vs-mpi: ") and f"on {n} ranks" in line and ", 0 mismatches;" in line
               for line in out.splitlines()), out


def test_ranks_mixing_blocking_and_async_collectives(run_mpi_shared):
    # MPI matches no blocking collective with a non-blocking one: one rank's
    # dist.all_reduce(t) and the other's all_reduce(t, async_op=True) hung.
    out = _shared(run_mpi_shared, 2, "worker_mixed.py")
    assert "mixed ops: 66 checks on 2 ranks, 0 failures" in out, out


def test_collective_futures_complete_in_issue_order(run_mpi_shared):
    # MPI finished a small Iallreduce before the big one issued before it, and its future's
    # callbacks ran first, in a different order on each rank (ZeRO's interleaved step hook:
    # its buckets' broadcasts desynced). A callback waiting on a work its own thread was about
    # to finish hung, and so did one waiting for a large all_reduce queued behind a broadcast
    # (its request went to the progress thread, busy running that callback).
    out = _shared(run_mpi_shared, 2, "worker_order.py")
    assert "order: 10 rounds on 2 ranks, 0 out of order" in out, out


def test_ddp_join_uneven_inputs_matches_gloo(run_mpi_shared):
    # torch's Join: the joined rank's all_reduce is blocking, the others' async (hung).
    out = _shared(run_mpi_shared, 2, "worker_mixed.py")
    assert "mixed join: 4 parameters compared with gloo on 2 ranks, 0 failures" in out, out


@pytest.mark.parametrize("level, n, forwards", [("serialized", 2, 5), ("multiple", 3, 100)])
def test_ddp_buffer_broadcasts_never_hang(run_mpi, run_mpi_shared, level, n, forwards):
    # torch 2.4 (its C++ keeps no Python Work alive) freed a finished Work before DDP's
    # broadcast_coalesced waited on it: below MPI_THREAD_MULTIPLE at once, else now and then
    # (the progress thread finished both of its broadcasts first: 3 hangs in 36 worker_ddp.py runs).
    if (level, str(forwards)) == LIFETIME_SHARED:
        out = _shared(run_mpi_shared, n, "worker_lifetime.py")
    else:
        out = run_mpi("worker_lifetime.py", n, level, forwards, timeout=120)
    assert f"lifetime {level}: {forwards} forwards, buffers agree on {n} ranks" in out


def test_finished_works_kept_until_claimed():
    # Hand-counted: keep() holds works until wait()/get_future(); past 4096 it drops the oldest 2048.
    from commtrace.mpi import work

    others = dict(work._unclaimed)   # works of earlier tests in this process, put back at the end
    work._unclaimed.clear()
    try:
        a, b = work._DoneWork(), work._DoneWork()
        b._result = []
        work.keep(a)
        work.keep(b)
        assert list(work._unclaimed.values()) == [a, b]
        assert a.wait() is True and list(work._unclaimed.values()) == [b]
        assert b.get_future().value() == [] and not work._unclaimed
        many = [work._DoneWork() for _ in range(4097)]
        for w in many:
            work.keep(w)
        assert len(work._unclaimed) == 4097 - 2048
        assert next(iter(work._unclaimed.values())) is many[2048]
        for w in many:
            w.wait()
        assert not work._unclaimed
    finally:
        work._unclaimed.update(others)


def test_example_ddp_mpi_runs(run_mpi_shared):
    out = _shared(run_mpi_shared, 2, "run_with_install.py")
    assert "backend=mpi world=2" in out
    assert "epoch 0 step 1 loss" in out


def test_commtrace_run_traces_ddp_mpi(run_mpi, tmp_path):
    # The workflow the issue is about: mpirun -n 2 python -m commtrace run ddp_mpi.py
    out_dir = tmp_path / "trace"
    out = run_mpi(["-m", "commtrace", "run", "-o", out_dir, ROOT / "examples" / "ddp_mpi.py"], 2,
                  *EXAMPLE_ARGS, timeout=120)
    assert "backend=mpi world=2" in out
    assert len(list(out_dir.glob("rank*.ops.bin"))) == 2


def test_compiled_ddp_on_mpi(run_mpi_shared):
    # torch.compile'd DDP calls the backend's Python methods from C++ while compiled code runs.
    out = _shared(run_mpi_shared, 2, "worker_compiled.py")
    assert out.count("compiled: match") == 2, out


def test_compiled_ddp_on_mpi_traced(run_mpi, tmp_path):
    out_dir = tmp_path / "trace"
    out = run_mpi(["-m", "commtrace", "run", "-o", out_dir, ROOT / "tests" / "mpi" / "worker_compiled.py"], 2,
                  timeout=240)
    assert out.count("compiled: match") == 2, out
    import commtrace
    df = commtrace.load(str(out_dir))
    mpi = df[df["backend"].astype(str) == "mpi"]
    assert set(mpi["status"]) == {"completed"} and (mpi["phase"].astype(str) == "backward").sum() == 2 * 3


def test_check_device_messages():
    # CUDA cannot be exercised without a GPU: test the check itself.
    from commtrace.mpi.backend import check_device

    check_device("cpu")
    check_device("cuda:0", is_cuda_aware=True)
    with pytest.raises(RuntimeError, match="cuda:0.*not CUDA-aware"):
        check_device("cuda:0", is_cuda_aware=False)
    with pytest.raises(RuntimeError, match="meta"):
        check_device("meta")


def test_reduce_op_errors_name_op_and_dtype():
    import torch
    from commtrace.mpi import dtypes

    R = dist.ReduceOp
    with pytest.raises(ValueError, match="PREMUL_SUM.*bfloat16"):
        dtypes.reduce_op(R.PREMUL_SUM, torch.bfloat16)
    with pytest.raises(ValueError, match="BXOR.*float16"):
        dtypes.reduce_op(R.BXOR, torch.float16)
    with pytest.raises(ValueError, match="MIN.*complex64"):
        dtypes.reduce_op(R.MIN, torch.complex64)


def test_recv_from_any_source_knows_its_sender(run_mpi_shared):
    # A recv_anysource finished by the progress thread (MPI_Testsome without statuses)
    # reported sender -1: torch's test_send_recv_any_source failed under commtrace run.
    out = _shared(run_mpi_shared, 3, "worker_anysource.py")
    assert "anysource: 10 receives on 3 ranks, wrong senders: []" in out, out


def test_a_traced_recv_from_any_source_records_its_sender(run_mpi, tmp_path):
    """Traced (the Python wrapper: the mpi group is written in Python), each recv from any source
    names the rank it received from once it completed (its trace's ``source`` line: the frame's
    ``root``), in the order the program saw them."""
    import ast

    import commtrace
    out = run_mpi(["-m", "commtrace", "run", "-o", tmp_path / "run", ROOT / "tests" / "mpi" / "worker_anysource.py"],
                  3, timeout=120)
    assert "anysource: 10 receives on 3 ranks, wrong senders: []" in out, out
    senders = ast.literal_eval(out.split("received from: ", 1)[1].splitlines()[0])
    df = commtrace.load(str(tmp_path / "run"))
    recvs = df[(df["rank"] == 0) & (df["variant"].astype(str) == "recv_anysource")].sort_values("t_start_ns")
    assert recvs["root"].tolist() == senders and sorted(senders) == [1] * 5 + [2] * 5


def test_profiler_events_of_ops(run_mpi_shared):
    # One "mpi:<op>" event per op, titled as torch's ProcessGroupMPI titles it, with its input
    # shapes (torch's DistributedTest counts them); none when no profiler is on. Python group:
    # async only where the op ended on another thread (worker_profiler.py; native: test_native_mpi.py).
    out = _shared(run_mpi_shared, 3, "worker_profiler.py")
    assert out.count("on 3 ranks, path python, failures: []") == 3, out
