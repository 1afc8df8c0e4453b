"""A DDP rank that raises mid-step under torchrun (workers/crash_mid_step.py): rank 1
raises between its forward and backward of step 3; rank 0's backward launches the
gradient bucket's all_reduce (seq 8: DDP's 3 construction ops, step 1's bucket, step 2's
rebuild broadcasts and bucket) and fails when rank 1's process is gone. Traced as
untraced (same stdout and exit code), the trace keeps every op, and ``commtrace check``
names the rank that raised, the op and group it left rank 0 in."""
import os
import re

import commtrace
import helpers as h

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "crash_mid_step.py")


def _torchrun(*args):
    return h.run([h.TORCHRUN, "--nproc_per_node", "2", "--master-port", h.free_port(), *args], timeout=180)


def test_rank_raising_mid_step_is_named(tmp_path):
    run = str(tmp_path / "run")
    plain, traced = h.concurrently(lambda: _torchrun(WORKER),
                                   lambda: _torchrun("-m", "commtrace", "run", "-o", run, WORKER))
    assert plain.returncode == traced.returncode == 1
    # the ranks share torchrun's stdout: their lines may interleave
    losses = [sorted(re.findall(r"rank \d step \d loss [\d.]+", res.stdout)) for res in (plain, traced)]
    assert losses[0] == losses[1] and len(losses[0]) == 4, losses   # steps 1 and 2 on both ranks
    check = h.commtrace_main("check", run).check(1)
    errors = [line for line in check.stdout.splitlines() if line.startswith("ERROR")]
    assert errors[:2] == ["ERROR rank 1 raised ValueError: bad batch at step 3",
                          "ERROR group 0 (default_pg) seq 8: all_reduce [[36]] entered by rank 0; "
                          "rank 1 never arrived"], check.stdout
    df = commtrace.load(run)
    assert sorted(df[df["rank"] == 1]["seq"]) == list(range(1, 8))
    last = df[(df["rank"] == 0) & (df["seq"] == 8)].iloc[0]
    assert (last.op, last.phase, last.module, int(last.bucket), last.bytes) == (
        "all_reduce", "backward", "Linear", 0, 144)
    # failed as gloo sees rank 1's socket close; in flight had torchrun's SIGTERM come first
    assert last.status != "completed"
    steps = commtrace.load(run, table="steps")
    assert sorted(zip(steps["rank"], steps["step"], steps["ops"])) == [(0, 1, 1), (0, 2, 3), (1, 1, 1), (1, 2, 3)]
