"""Hot-path cost of the ProcessGroup wrapper, plain vs traced, side by side in one run.

Two ranks. The same real process group is called directly (plain) and through a
traced wrapper (the one `commtrace run` installs: native when built) with a real Recorder and flush thread (traced), alternating
in blocks so machine noise hits both alike.

* ``--backend gloo``: two processes via torch.multiprocessing.spawn.
* ``--backend mpi``: the same worker under ``mpirun -n 2`` with
  ``commtrace.mpi.install()`` and ``init_process_group("mpi")`` (reported as
  not available when commtrace.mpi, mpi4py or mpirun is missing).

Each block times every call separately and keeps the block's median (robust to
the VM's wake-up spikes); the figure is the median over blocks of the paired
difference traced - plain, with the spread (min..max) of those differences.
"Issue cost" is the time for ``allreduce(..., async_op=True)`` to return (the
op is waited for outside the timed region): the wrapper's own CPU cost without
the network/wake-up noise of a blocking round trip. "Caller CPU" is the CPU
time of the calling thread per blocking call (``time.thread_time_ns``): the
steadiest figure on a shared machine, and the one that shows what the
wrapper's Python costs when it runs right after a thread wake-up (cold caches).

    python benchmarks/bench_capture.py [--backend gloo|mpi] [--reps 15] [--calls 400] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist

from commtrace import torch_compat
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from intervals import median_ci  # noqa: E402
ROOT = os.path.dirname(HERE)
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}

CASES = (
    "all_reduce 1 elem",
    "all_reduce 64 KB",
    "all_reduce 4 MB",
    "broadcast 1 elem",
    "barrier",
    "issue cost: all_reduce 1 elem async",
    "issue cost: all_reduce 64 KB async",
    "caller CPU: all_reduce 1 elem",
)

# Measured through the Python wrapper as well when the native one is in use.
PYTHON_REFERENCE_CASES = ("all_reduce 1 elem", "caller CPU: all_reduce 1 elem")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def paired(plain: list[float], traced: list[float], scale: float = 1e-3) -> dict:
    """Side-by-side summary of paired block figures (ns in, µs out by default); ``*_ci``:
    95 % interval of the median (intervals.median_ci; None with fewer than 6 blocks)."""
    diffs = [b - a for a, b in zip(plain, traced)]
    ratios = [b / a for a, b in zip(plain, traced) if a > 0]
    ci = median_ci(diffs)
    return {
        "plain": statistics.median(plain) * scale, "traced": statistics.median(traced) * scale,
        "added": statistics.median(diffs) * scale,
        "added_spread": [min(diffs) * scale, max(diffs) * scale],
        "ratio": statistics.median(ratios) if ratios else float("nan"),
        "ratio_spread": [min(ratios), max(ratios)] if ratios else [float("nan")] * 2,
        "added_ci": ci and [ci[0] * scale, ci[1] * scale], "ratio_ci": median_ci(ratios),
        "blocks": len(diffs),
    }


def make_traced(pg, run_dir: str, backend: str, wrapper: str = "auto"):
    """(traced group over ``pg``, its real Recorder with flush thread). ``wrapper``:
    "auto" is what ``commtrace run`` picks (native_wrapper.kind_for), "python"
    forces the Python TracedProcessGroup."""
    from commtrace.capture import native_wrapper
    from commtrace.capture.recorder import Recorder
    from commtrace.capture.wrapper import TracedProcessGroup
    rec = Recorder(run_dir, "bench", "none", ["bench"])
    rec.add_world({"world_id": "bench", "rank": pg.rank(), "world_size": pg.size(), "backend": backend})
    ranks = list(range(pg.size()))
    gid = rec.add_group({"world": 0, "name": "bench", "backend": backend, "size": pg.size(),
                         "rank": pg.rank(), "ranks": ranks})
    if wrapper == "python":
        return TracedProcessGroup(pg, rec, gid, ranks), rec
    return native_wrapper.make_traced(pg, rec, gid, ranks), rec


def wrapper_kind(pg) -> str:
    from commtrace.capture import native_wrapper
    return native_wrapper.kind_for(pg)


def _opts(cls, async_op: bool, **kw):
    return torch_compat.make_options(cls, async_op=async_op, **kw)


def _blocking(call, n: int) -> float:
    """Median ns of ``n`` blocking calls (each timed alone)."""
    now = time.perf_counter_ns
    s = []
    for _ in range(n):
        t0 = now()
        call().wait()
        s.append(now() - t0)
    return statistics.median(s)


def _issue(call, n: int) -> float:
    """Median ns for an async call to return; the op is waited for after timing."""
    now = time.perf_counter_ns
    s = []
    for _ in range(n):
        t0 = now()
        w = call()
        s.append(now() - t0)
        w.wait()
    return statistics.median(s)


def _caller_cpu(call, n: int) -> float:
    """Mean CPU ns the calling thread spends per blocking call (thread_time):
    what the wrapper adds on this thread, without the wake-up noise of wall time."""
    cpu = time.thread_time_ns
    t0 = cpu()
    for _ in range(n):
        call().wait()
    return (cpu() - t0) / n


def case_fns(calls: int, only=None) -> dict:
    """name -> fn(pg) -> ns. Each takes a plain or traced group."""
    sync_ar = _opts(dist.AllreduceOptions, False)
    async_ar = _opts(dist.AllreduceOptions, True)
    bc = _opts(dist.BroadcastOptions, False, rootRank=0)
    bar = _opts(dist.BarrierOptions, False)
    one, k64, m4 = torch.ones(1), torch.ones(16384), torch.ones(1 << 20)
    one_b = torch.ones(1)
    fns = {
        "all_reduce 1 elem": lambda pg: _blocking(lambda: pg.allreduce([one], sync_ar), calls),
        "all_reduce 64 KB": lambda pg: _blocking(lambda: pg.allreduce([k64], sync_ar), max(calls // 4, 5)),
        "all_reduce 4 MB": lambda pg: _blocking(lambda: pg.allreduce([m4], sync_ar), max(calls // 40, 5)),
        "broadcast 1 elem": lambda pg: _blocking(lambda: pg.broadcast([one_b], bc), calls),
        "barrier": lambda pg: _blocking(lambda: pg.barrier(bar), calls),
        "issue cost: all_reduce 1 elem async": lambda pg: _issue(lambda: pg.allreduce([one], async_ar), calls),
        "issue cost: all_reduce 64 KB async": lambda pg: _issue(lambda: pg.allreduce([k64], async_ar), max(calls // 4, 5)),
        "caller CPU: all_reduce 1 elem": lambda pg: _caller_cpu(lambda: pg.allreduce([one], sync_ar), calls),
    }
    return {k: v for k, v in fns.items() if only is None or k in only}


def alternate(run_plain, run_traced, reps: int) -> dict:
    """``paired`` over ``reps`` blocks of each, after one warm-up of each (sig
    interning, backend buffers). Which goes first alternates, so drift and
    ordering effects cancel."""
    run_plain(), run_traced()
    p, tr = [], []
    for i in range(reps):
        if i % 2:
            tr.append(run_traced())
            p.append(run_plain())
        else:
            p.append(run_plain())
            tr.append(run_traced())
    return paired(p, tr)


def measure(plain, traced, calls: int, reps: int, only=None) -> dict:
    return {name: alternate(lambda: fn(plain), lambda: fn(traced), reps)
            for name, fn in case_fns(calls, only).items()}


def _body(backend: str, calls: int, reps: int, only, out_path: str | None) -> None:
    torch.set_num_threads(1)
    plain = dist.distributed_c10d._get_default_group()
    d = tempfile.mkdtemp(prefix="ct-bench-")
    try:
        traced, rec = make_traced(plain, d, backend)
        results = {"wrapper": wrapper_kind(plain), "cases": measure(plain, traced, calls, reps, only)}
        # The same ops issued inside a DDP comm hook's bucket scope (capture.comm_hooks):
        # the calling thread has a context of its own, looked up per op.
        token = rec.push_thread_context({"phase": "backward", "module": "Net", "bucket": 0})
        results["comm_hook_scope"] = measure(plain, traced, calls, reps, only=PYTHON_REFERENCE_CASES)
        rec.pop_thread_context(token)
        # The same ops while a Python thread of the program runs (it reads a blank context:
        # capture.annotation_context.begin_program_thread): the calling thread's is looked up.
        begun, done = threading.Event(), threading.Event()

        def program_thread():
            t = rec.begin_program_thread()
            begun.set()
            done.wait()
            rec.end_program_thread(t)
        side = threading.Thread(target=program_thread)
        side.start()
        begun.wait()
        results["program_thread"] = measure(plain, traced, calls, reps, only=PYTHON_REFERENCE_CASES)
        done.set()
        side.join()
        rec.close()
        if results["wrapper"] == "native":  # the Python wrapper on the headline cases, same run
            traced, rec = make_traced(plain, tempfile.mkdtemp(dir=d), backend, wrapper="python")
            results["python_wrapper"] = measure(plain, traced, calls, reps, only=PYTHON_REFERENCE_CASES)
            rec.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if dist.get_rank() == 0 and out_path:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def _gloo_worker(rank, port, calls, reps, only, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    _body("gloo", calls, reps, only, out_path)


def _mpi_worker(calls, reps, only, out_path):
    import commtrace.mpi
    commtrace.mpi.install()
    dist.init_process_group("mpi")
    _body("mpi", calls, reps, only, out_path)


def mpi_available() -> str | None:
    """None if the mpi backend can be benchmarked, else why not."""
    try:
        import commtrace.mpi  # noqa: F401
    except ImportError:
        return "commtrace.mpi not present"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py not installed"
    if not os.path.exists(mpirun_path()):
        return "mpirun not found"
    return None


def run_under_mpirun(script: str, args: list[str], out_path: str, timeout: float) -> str | None:
    """Run ``script args`` on 2 ranks under mpirun (untraced); None if it wrote
    ``out_path``, else why not (one line)."""
    env = {**os.environ, **MPI_ENV, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("COMMTRACE_DIR", None)
    p = subprocess.run([mpirun_path(), "--oversubscribe", "-n", "2", sys.executable, script, *args],
                       env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0 or not os.path.exists(out_path):
        tail = (p.stderr or p.stdout or "").strip().splitlines()[-3:]
        return f"mpirun failed (rc={p.returncode}): {' | '.join(tail)}"
    return None


def mpirun_path() -> str:
    p = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return p if os.path.exists(p) else (shutil.which("mpirun") or p)


def run(backend: str = "gloo", calls: int = 400, reps: int = 15, only=None, timeout: float = 600) -> dict:
    """{"backend", "available", "reason", "wrapper", "cases": {name: paired summary (µs)},
    "python_wrapper": {name: ...} (only when the native wrapper was measured),
    "comm_hook_scope": {name: ...} (the wrapper `commtrace run` picks, inside a comm hook's bucket scope),
    "program_thread": {name: ...} (the same while another Python thread of the program runs)}."""
    out = {"backend": backend, "available": True, "reason": None, "wrapper": None, "cases": {}}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        if backend == "gloo":
            mp.spawn(_gloo_worker, args=(free_port(), calls, reps, only, path), nprocs=2)
        elif backend == "mpi":
            why = mpi_available()
            if why:
                return {**out, "available": False, "reason": why}
            args = ["--mpi-worker", "--calls", str(calls), "--reps", str(reps), "--json", path]
            if only:
                args += ["--only", ",".join(only)]
            why = run_under_mpirun(os.path.abspath(__file__), args, path, timeout)
            if why:
                return {**out, "available": False, "reason": why}
        else:
            raise ValueError(backend)
        with open(path) as f:
            out.update(json.load(f))
    return out


def print_table(res: dict) -> None:
    print(f"[{res['backend']}]" + ("" if res["available"] else f" not available: {res['reason']}")
          + (f" {res['wrapper']} wrapper" if res.get("wrapper") else ""))
    if not res["available"]:
        return
    print(f"{'case':40} {'plain µs':>10} {'traced µs':>10} {'added µs':>10} {'spread µs':>20} {'ratio':>7}")
    rows = list(res["cases"].items())
    rows += [(f"{name} (Python wrapper)", r) for name, r in res.get("python_wrapper", {}).items()]
    rows += [(f"{name} (in a comm hook)", r) for name, r in res.get("comm_hook_scope", {}).items()]
    rows += [(f"{name} (a program thread runs)", r) for name, r in res.get("program_thread", {}).items()]
    for name, r in rows:
        spread = f"{r['added_spread'][0]:.2f}..{r['added_spread'][1]:.2f}"
        print(f"{name:40} {r['plain']:10.2f} {r['traced']:10.2f} {r['added']:10.2f} {spread:>20} {r['ratio']:7.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["gloo", "mpi", "both"], default="gloo")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    only = args.only.split(",") if args.only else None
    if args.mpi_worker:
        _mpi_worker(args.calls, args.reps, only, args.json)
        return 0
    backends = ["gloo", "mpi"] if args.backend == "both" else [args.backend]
    results = [run(b, args.calls, args.reps, only) for b in backends]
    for r in results:
        print_table(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results if len(results) > 1 else results[0], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
