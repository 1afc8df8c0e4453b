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
