"""The report's and compare's reader warnings, and the banner's incomplete ranks, at many
ranks: one problem on many ranks' files is one line naming them as rank ranges."""
from __future__ import annotations

from commtrace.render.cli_commands import warn_issues
from commtrace.trace.reader import TraceIssue

ABRUPT = "trace ends abruptly (no end record: still running, killed, or crashed)"


def test_one_problem_on_many_ranks_is_one_line(capsys):
    issues = [f"rank{r}.pid{100 + r}.meta.jsonl (rank {r}): {ABRUPT}" for r in [*range(512, 1024), 3]]
    issues += [TraceIssue("rank7.pid107.ops.bin", "truncated mid-record (7 trailing bytes ignored)", 7),
               "world w0: ranks missing: 1,2 of 1024"]
    warn_issues(issues)
    assert capsys.readouterr().err.splitlines() == [
        f"commtrace: warning: rank 3,512-1023 (513 files): {ABRUPT}",
        "commtrace: warning: rank7.pid107.ops.bin (rank 7): truncated mid-record (7 trailing bytes ignored)",
        "commtrace: warning: world w0: ranks missing: 1,2 of 1024",
    ]


def test_banner_names_incomplete_ranks_as_ranges(tmp_path):
    import os
    import subprocess
    import sys

    from commtrace.trace.synthetic import write_synthetic_run
    d = write_synthetic_run(str(tmp_path / "r"), ranks=8, ops_per_rank=8)
    for name in os.listdir(d):
        if name.endswith(".meta.jsonl") and int(name[4:name.index(".")]) >= 4:
            p = os.path.join(d, name)
            lines = open(p).read().splitlines(True)
            open(p, "w").writelines(x for x in lines if '"type":"end"' not in x)
    p = subprocess.run([sys.executable, "-m", "commtrace", "report", d], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "ranks      8 of 8  (incomplete: 4-7)" in p.stdout
    assert p.stderr.splitlines() == [f"commtrace: warning: rank 4-7 (4 files): {ABRUPT}"]


def test_at_most_16_warning_lines(capsys):
    """20 files, each truncated by a different number of bytes (no two texts equal): 16 lines, then the count."""
    issues = [f"rank{r}.pid{r}.ops.bin (rank {r}): truncated mid-record ({r + 1} trailing bytes ignored)"
              for r in range(20)]
    warn_issues(issues)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"commtrace: warning: {i}" for i in issues[:16]] + [
        "commtrace: warning: ... and 4 more problems with the trace files (commtrace check names each)"]
