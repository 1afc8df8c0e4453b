"""Two simulated hosts on one machine, under mpirun, torchrun and mp.spawn (launch helpers).

Rank 1's "host" runs with the test-only ``COMMTRACE_TEST_CLOCK_SHIFT_NS`` (its
monotonic clock as written and as sent in ping-pong is shifted by a known
amount) and ``COMMTRACE_TEST_HOST`` (another host name), exactly as a rank on
another host differs: the launcher gives each host its own environment. Each
launch runs once per session; several tests read its trace.
"""
from __future__ import annotations

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
HOST_B = "simulated-host-b"
# Shifts of rank 1's clock per launcher (one negative: the sign must come out right too).
SHIFTS = {"mpirun": 7_000_000_000, "torchrun": -2_500_000_000, "spawn": 11_000_000_000}


def host_b_env(shift_ns: int) -> dict:
    return {"COMMTRACE_TEST_CLOCK_SHIFT_NS": str(shift_ns), "COMMTRACE_TEST_HOST": HOST_B}


def run_hosts(commands: list[tuple[list, dict]], timeout: float = 120) -> list[h.Result]:
    """Start one launch per simulated host together; wait for all (each in its own
    session, killed on timeout)."""
    procs = [subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=h.REPO, start_new_session=True) for args, env in commands]
    results = []
    for p, (args, _) in zip(procs, commands):
        try:
            out, err = p.communicate(timeout=timeout)
            results.append(h.Result(args, p.returncode, out, err))
        except subprocess.TimeoutExpired:
            for q in procs:
                h.kill_session(q)
            out, err = p.communicate()
            results.append(h.Result(args, p.returncode, out, err, timed_out=True))
    for p in procs:
        h.kill_session(p)
    return results


class HostsRun:
    def __init__(self, run_dir, shift_ns: int, probe: str):
        self.run_dir, self.shift_ns, self.probe = str(run_dir), shift_ns, probe


def _mpirun(tmp) -> HostsRun:
    h.require_mpirun()
    run_dir, probe = tmp / "run", str(tmp / "probe")
    shift = SHIFTS["mpirun"]
    host_b = [f"{k}={v}" for k, v in host_b_env(shift).items()]
    args = [h.MPIRUN, "--oversubscribe", "--bind-to", "none",
            "-n", "1", h.PY, "-m", "commtrace", "run", "-o", run_dir, WORKER, "env", ":",
            "-n", "1", "env", *host_b, h.PY, "-m", "commtrace", "run", "-o", run_dir, WORKER, "env"]
    h.run(args, env=h.mpi_env(CLOCK_TEST_PROBE=probe), timeout=120).check()
    return HostsRun(run_dir, shift, probe)


def _torchrun(tmp) -> HostsRun:
    run_dir, probe = tmp / "run", str(tmp / "probe")
    shift, port = SHIFTS["torchrun"], h.free_port()
    env = h.clean_env(CLOCK_TEST_PROBE=probe)

    def node(rank):
        return [h.TORCHRUN, "--nnodes", "2", "--node_rank", rank, "--nproc_per_node", "1", "--rdzv-id", "clock",
                "--master_addr", "127.0.0.1", "--master_port", port, "-m", "commtrace", "run", "-o", run_dir,
                WORKER, "env"]
    for r in run_hosts([(node(0), env), (node(1), {**env, **host_b_env(shift)})]):
        r.check()
    return HostsRun(run_dir, shift, probe)


def _spawn(tmp) -> HostsRun:
    """Multi-node mp.spawn: each host's launch spawns its own rank."""
    run_dir, probe = tmp / "run", str(tmp / "probe")
    shift, port = SHIFTS["spawn"], h.free_port()
    env = h.clean_env(CLOCK_TEST_PROBE=probe, COMMTRACE_RUN_ID="clock-spawn")

    def node(rank):
        return h.commtrace_cmd(run_dir, WORKER, "spawn", rank, 2, port)
    for r in run_hosts([(node(0), env), (node(1), {**env, **host_b_env(shift)})]):
        r.check()
    return HostsRun(run_dir, shift, probe)


LAUNCHES = {"mpirun": _mpirun, "torchrun": _torchrun, "spawn": _spawn}
