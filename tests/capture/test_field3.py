"""Programs and launches as third parties write them (third round): what commtrace must get right."""
from __future__ import annotations

import os
import time

import helpers as h
from helpers import worker

from commtrace.capture import launch


def _torchrun_job(cwd, rdzv_id: str, out) -> h.Result:
    """A one-node torchrun job of 2 ranks under ``rdzv_id`` (c10d rendezvous), traced into
    the default directory under ``cwd``."""
    return h.run([h.TORCHRUN, "--rdzv-id", rdzv_id, "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", f"127.0.0.1:{h.free_port()}", "--nnodes", "1", "--nproc_per_node", "2",
                  "-m", "commtrace", "run", worker("trun.py"), out], cwd=cwd, timeout=120)


def test_torchrun_jobs_reusing_a_rdzv_id_get_a_run_directory_each(tmp_path):
    """`torchrun --rdzv-id 123 ...` run again (the id PyTorch's docs show): the second job's
    ranks read the first job's claim and wrote into its directory, whose report then merged
    both jobs as one run of two worlds."""
    for job in ("a", "b"):
        _torchrun_job(tmp_path, "fixed", tmp_path / job).check()
    runs = sorted(p for p in (tmp_path / "commtrace-out").iterdir() if not p.name.startswith("."))
    assert len(runs) == 2, runs
    for run in runs:
        df = h.load(run)
        assert len(df.attrs["processes"]) == 2 and (df["op"] == "all_reduce").sum() == 2


def test_claim_of_an_earlier_job_is_passed_over_alike_by_every_rank(tmp_path):
    """A claim older than this job's agent (``not_before``) is an earlier job's; ranks of the
    job (a torchrun restart included: same agent) share the next claim; no claim is moved
    (two ranks seeing the old claim at once must not take each other's)."""
    base = str(tmp_path)
    earlier = launch.claim_name(base, "torchrun-fixed")
    claim = tmp_path / launch.CLAIMS / os.listdir(tmp_path / launch.CLAIMS)[0]
    os.utime(claim, (time.time() - 100, time.time() - 100))   # written 100 s ago
    started = time.time() - 10   # this job's agent started after the earlier claim
    mine = launch.claim_name(base, "torchrun-fixed", not_before=started)
    assert mine != earlier
    assert launch.claim_name(base, "torchrun-fixed", not_before=started) == mine   # another rank, a restart
    assert sorted(os.listdir(tmp_path / launch.CLAIMS))[1].endswith(".1")
    assert launch.claim_name(base, "torchrun-fixed", not_before=started - 200) == earlier  # the earlier job's rank


_TIMER_LEFT_ARMED = """\
import os, signal, sys
import torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
for _ in range(int(sys.argv[2])):
    dist.all_reduce(torch.ones(10))
class Tick(Exception):
    pass
def on_alarm(signum, frame):
    raise Tick()
signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)   # a progress tick, left armed at exit
ticks = 0
while ticks < 3:
    try:
        sum(range(1000))
    except Tick:
        ticks += 1
"""


def test_program_signal_handler_raising_at_exit_loses_no_records(tmp_path):
    """A timer the program left armed fires while commtrace writes the trace at exit: its
    handler's exception, raised inside that write, lost every record (the file held the
    header only; the report: "no process created a process group"). The program's handlers
    now wait from the script's end until the trace is written, as SIGINT's and SIGTERM's did.
    (Losses were 4 of 4 before; 1 in 8 when only the close itself held them.)"""
    script = tmp_path / "ticks.py"
    script.write_text(_TIMER_LEFT_ARMED)
    r = h.run(h.commtrace_cmd(tmp_path / "run", script, h.free_port(), 500))
    df = h.load(tmp_path / "run")
    assert len(df.attrs["processes"]) == 1, r.stderr[-3000:]
    (proc,) = df.attrs["processes"]
    # "exception" when the timer fired in the script's own last bytecodes (as untraced: exit 1)
    assert proc["end"] is not None and proc["end"]["how"] in ("exit", "exception"), proc["end"]
    assert (df["op"] == "all_reduce").sum() == 500


_FAILS_AFTER_ITS_GROUP = """\
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("mpi")
rank = dist.get_rank()
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
if rank == 0:
    open(sys.argv[1], "w").close()      # its script's last line: it then waits in commtrace's clock measurement
else:
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError("rank 1 fails after its group is gone")
"""


def test_rank_ended_by_the_launcher_after_its_script_ended_is_no_error(tmp_path):
    """Under mpirun, a rank whose script ended well waits for its peers in commtrace's end-of-run
    clock measurement; when another rank fails, mpirun ends it there by SIGTERM. check called that
    "rank 0 terminated by SIGTERM", an error beside the real one. The end record now says the
    script had ended (``script_exit_code``), and check says so, as a warning."""
    script = tmp_path / "late_failure.py"
    script.write_text(_FAILS_AFTER_ITS_GROUP)
    r = h.run(h.mpirun_cmd(2, h.PY, "-m", "commtrace", "run", "-o", tmp_path / "run", script,
                          tmp_path / "rank0_ended"), env=h.mpi_env(),
              timeout=120)
    assert r.returncode != 0 and "rank 1 fails" in r.stderr, r.stderr[-2000:]
    check = h.commtrace_main("check", "--json", tmp_path / "run")
    import json
    findings = json.loads(check.stdout)["findings"]
    errors = [f for f in findings if f["severity"] == "error"]
    assert [f["ranks"] for f in errors] == [[1]] and "RuntimeError" in errors[0]["title"], errors
    rank0 = [f for f in findings if f["ranks"] == [0] and f["kind"] == "exited"]
    if rank0:     # mpirun ended rank 0 in the clock measurement (else it had left before rank 1 failed)
        assert rank0[0]["severity"] == "warning" and "ended its script (exit code 0)" in rank0[0]["title"], rank0
