"""The report's and compare's reader warnings, and the banner's incomplete ranks, at many
ranks: one problem on many ranks' files is one line naming them as rank ranges."""
from __future__ import annotations

from commtrace.cli.options import warn_issues
from commtrace.trace.reader import ABRUPT as ABRUPT_KIND
from commtrace.trace.reader import DAMAGED, RANKS_MISSING, TRUNCATED, TraceIssue

ABRUPT = "trace ends abruptly (no end record: still running, killed, or crashed)"


def _abrupt(r: int, pid: int | None = None) -> TraceIssue:
    return TraceIssue(f"rank{r}.pid{pid or 100 + r}.meta.jsonl", ABRUPT, r, ABRUPT_KIND)


def test_one_problem_on_many_ranks_is_one_line(capsys):
    """Folded by the issues' fields: rank 3 and 512-1023 (513 files, 514 issues: rank 600
    restarted, two files) end abruptly; a rank-less file with the same problem and the
    world's missing ranks stay lines of their own."""
    issues = [_abrupt(r) for r in [*range(512, 1024), 3]] + [_abrupt(600, pid=9600)]
    issues += [TraceIssue("rank7.pid107.ops.bin", "truncated mid-record (7 trailing bytes ignored)", 7, TRUNCATED),
               TraceIssue("pid55.meta.jsonl", ABRUPT, None, ABRUPT_KIND),
               TraceIssue("", "ranks missing: 1-2 of 1024", kind=RANKS_MISSING, world="w0", ranks=(1, 2))]
    warn_issues(issues)
    assert capsys.readouterr().err.splitlines() == [
        f"commtrace: warning: rank 3,512-1023 (514 files): {ABRUPT}",
        "commtrace: warning: rank7.pid107.ops.bin (rank 7): truncated mid-record (7 trailing bytes ignored)",
        f"commtrace: warning: pid55.meta.jsonl: {ABRUPT}",
        "commtrace: warning: world w0: ranks missing: 1-2 of 1024",
    ]


def test_equal_text_of_another_kind_is_not_folded(capsys):
    """Ranks 0-1: the same phrase, but rank 1's is damage and rank 0's a torn record: two lines."""
    warn_issues([TraceIssue("rank0.pid1.ops.bin", "cut", 0, TRUNCATED),
                 TraceIssue("rank1.pid2.ops.bin", "cut", 1, DAMAGED),
                 TraceIssue("rank2.pid3.ops.bin", "cut", 2, TRUNCATED)])
    assert capsys.readouterr().err.splitlines() == ["commtrace: warning: rank 0,2 (2 files): cut",
                                                    "commtrace: warning: rank1.pid2.ops.bin (rank 1): cut"]


def test_banner_names_incomplete_ranks_as_ranges(tmp_path):
    import os
    import subprocess
    import sys

    from synthetic import write_synthetic_run
    d = write_synthetic_run(str(tmp_path / "r"), ranks=8, ops_per_rank=8)
    for name in os.listdir(d):
        if name.endswith(".meta.jsonl") and int(name[4:name.index(".")]) >= 4:
            p = os.path.join(d, name)
            lines = open(p).read().splitlines(True)
            open(p, "w").writelines(x for x in lines if '"type":"end"' not in x)
    p = subprocess.run([sys.executable, "-m", "commtrace", "report", d], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "ranks      8 of 8\n" in p.stdout
    assert "\n  ended      rank 4-7: trace ends abruptly (killed" in p.stdout
    assert p.stderr.splitlines() == [f"commtrace: warning: rank 4-7 (4 files): {ABRUPT}"]


def test_both_report_paths_warn_alike(tmp_path):
    """8 ranks: ranks 1-2 have a corrupt meta line, ranks 4-7 no end line, rank 6 three
    trailing bytes in its ops file. The partitioned report reads each meta file twice
    (plan, then each rank's task): its warnings are still the one-frame report's."""
    import os
    import subprocess
    import sys

    from synthetic import write_synthetic_run
    d = write_synthetic_run(str(tmp_path / "r"), ranks=8, ops_per_rank=8)
    for name in os.listdir(d):
        r, p = int(name[4:name.index(".")]), os.path.join(d, name)
        if name.endswith(".meta.jsonl") and r >= 4:
            lines = open(p).read().splitlines(True)
            open(p, "w").writelines(x for x in lines if '"type":"end"' not in x)
        if name.endswith(".meta.jsonl") and r in (1, 2):
            open(p, "a").write("garbage{\n")
        if name.endswith(".ops.bin") and r == 6:
            open(p, "ab").write(b"123")
    errs = []
    for extra in ((), ("--partitioned",)):
        p = subprocess.run([sys.executable, "-m", "commtrace", "report", d, "-q", *extra], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 1, p.stderr     # damaged data left out
        errs.append(p.stderr.splitlines())
    assert errs[0] == errs[1]
    assert errs[0][:3] == [
        "commtrace: warning: rank 1-2 (2 files): 1 corrupt metadata line(s) skipped",
        f"commtrace: warning: rank 4-7 (4 files): {ABRUPT}",
        "commtrace: warning: rank6.pid10006.ops.bin (rank 6): truncated mid-record (3 trailing bytes ignored)"]


def test_at_most_16_warning_lines(capsys):
    """20 files, each truncated by a different number of bytes (no two texts equal): 16 lines, then the count."""
    issues = [TraceIssue(f"rank{r}.pid{r}.ops.bin", f"truncated mid-record ({r + 1} trailing bytes ignored)", r,
                         TRUNCATED) for r in range(20)]
    warn_issues(issues)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"commtrace: warning: rank{r}.pid{r}.ops.bin (rank {r}): truncated mid-record ({r + 1} trailing "
                   f"bytes ignored)" for r in range(16)] + [
        "commtrace: warning: ... and 4 more problems with the trace files (commtrace check names each)"]
