"""Bad input: one-line errors with exit code 2, or warnings plus a report of what is readable."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from commtrace.trace import schema
from synthetic import write_synthetic_run
from commtrace.trace.writer import TraceWriter

from .conftest import cli

EVIL = '[bold red]evil[/] "quoted"\n\x1b[31mred'


def write_hostile_run(d):
    """Two ranks whose strings try markup, quotes, newlines and terminal escapes."""
    d = str(d)
    for r in range(2):
        w = TraceWriter(d, f"rank{r}.pid{r + 1}")
        meta = [
            {"type": "header", "format": "commtrace", "version": 1, "host": "[link=http://x]host[/link]", "pid": r + 1,
             "rank": r, "run_id": "evil", "command": [EVIL], "t_wall_ns": 1, "t_mono_ns": 0},
            {"type": "world", "world": 0, "world_id": "w", "rank": r, "world_size": 2, "backend": "gloo"},
            {"type": "group", "id": 0, "world": 0, "world_id": "w", "name": "[red]g", "desc": EVIL, "backend": "gloo",
             "size": 2, "rank": r, "ranks": [0, 1]},
            {"type": "sig", "id": 0, "op": "all_reduce", "shapes": [[4]], "dtype": EVIL, "bytes": 16, "thread": EVIL},
        ]
        rec = np.zeros(3, dtype=schema.OP_RECORD)
        rec["t_call"] = [1000, 5000, 9000]
        rec["d_return"] = rec["d_end"] = 500
        rec["seq"] = [1, 2, 3]
        w.write(meta, rec)
        w.write([{"type": "end", "exit_code": 0, "how": "exit", "t_mono_ns": 20000}], None)
        w.close()
    return d


def run_cli_subprocess(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "commtrace", *map(str, argv)], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


def assert_one_line_error(proc, fragment):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commtrace: error: ") and fragment in lines[0], proc.stderr


def test_missing_directory(tmp_path):
    assert_one_line_error(run_cli_subprocess("report", tmp_path / "nope"), "no such directory")


def test_empty_directory(tmp_path):
    assert_one_line_error(run_cli_subprocess("report", tmp_path), "no trace files")


def test_no_default_run(tmp_path):
    assert_one_line_error(run_cli_subprocess("report", cwd=tmp_path), "commtrace-out")


def test_compare_missing(tmp_path, syn_run):
    assert_one_line_error(run_cli_subprocess("compare", syn_run, tmp_path / "nope"), "nope")


def test_fifo_among_the_files(tmp_path):
    """A FIFO named like a trace file would block the first read forever: one-line error instead."""
    d = write_synthetic_run(str(tmp_path / "r"), ranks=2, ops_per_rank=20)
    os.symlink(os.path.join(d, "gone"), os.path.join(d, "dangling"))  # not a blocking file: no error
    assert run_cli_subprocess("report", d).returncode == 0
    os.mkfifo(os.path.join(d, "rank0.pid1.cpp.ops.bin"))
    for command in ("report", "check"):
        assert_one_line_error(run_cli_subprocess(command, d), "rank0.pid1.cpp.ops.bin: not a regular file")


def test_all_corrupt(tmp_path):
    (tmp_path / "rank0.pid1.meta.jsonl").write_bytes(b"\x00\xffgarbage\n{not json\n")
    (tmp_path / "rank0.pid1.ops.bin").write_bytes(b"\x01" * 100)
    for command in (["report"], ["report", "--partitioned"], ["check"], ["check", "--partitioned"]):
        assert_one_line_error(run_cli_subprocess(*command, tmp_path), "no readable trace files (")


def test_unknown_version_everywhere(tmp_path):
    d = write_synthetic_run(str(tmp_path / "r"), ranks=2, ops_per_rank=20)
    for m in glob.glob(os.path.join(d, "*.meta.jsonl")):
        lines = open(m).read().splitlines()
        hdr = json.loads(lines[0])
        hdr["version"] = 99
        open(m, "w").write("\n".join([json.dumps(hdr)] + lines[1:]) + "\n")
    assert_one_line_error(run_cli_subprocess("report", d), "unknown format version 99")


def test_truncated_file_warns_and_reports(tmp_path, capsys):
    d = write_synthetic_run(str(tmp_path / "r"), ranks=2, ops_per_rank=50)
    ops = sorted(glob.glob(os.path.join(d, "*.ops.bin")))[1]
    size = os.path.getsize(ops)
    with open(ops, "r+b") as f:
        f.truncate(size - 10)
    proc = run_cli_subprocess("report", d)
    # The report of what is readable, then exit 1 with one line naming what was not.
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    *warnings, verdict = proc.stderr.strip().splitlines()
    assert warnings and all(w.startswith("commtrace: warning: ") for w in warnings)
    assert any(os.path.basename(ops) in w and "truncated" in w for w in warnings)
    assert verdict.startswith("commtrace: unreadable trace data left out of the figures: ")
    assert os.path.basename(ops) in verdict and "commtrace check" in verdict
    assert "99 ops" in proc.stdout  # 50 + 49 complete records


def test_one_bad_version_warns(tmp_path, capsys):
    d = write_synthetic_run(str(tmp_path / "r"), ranks=3, ops_per_rank=20)
    m = sorted(glob.glob(os.path.join(d, "*.meta.jsonl")))[2]
    lines = open(m).read().splitlines()
    hdr = json.loads(lines[0])
    hdr["version"] = 7
    open(m, "w").write("\n".join([json.dumps(hdr)] + lines[1:]) + "\n")
    assert cli("report", d) == 0
    cap = capsys.readouterr()
    assert "unknown format version 7" in cap.err and "ranks missing: 2 of 3" in cap.err
    assert "40 ops" in cap.out


def test_mixed_run_ids(tmp_path, capsys):
    d = str(tmp_path / "r")
    write_synthetic_run(d, ranks=2, ops_per_rank=20, run_id="A")
    other = str(tmp_path / "o")
    write_synthetic_run(other, ranks=3, ops_per_rank=20, run_id="B")
    for suffix in (".meta.jsonl", ".ops.bin"):
        os.rename(os.path.join(other, "rank2.pid10002" + suffix), os.path.join(d, "rank2.pid10002" + suffix))
    assert cli("report", d) == 0
    cap = capsys.readouterr()
    assert "rank2.pid10002.meta.jsonl: belongs to run 'B', not 'A'" in cap.err
    assert "40 ops" in cap.out
    # The partitioned report finds it from the same header field (the reader's run_id), once.
    assert cli("report", d, "--partitioned") == 0
    part = capsys.readouterr()
    assert part.err == cap.err and "40 ops" in part.out


def test_missing_ranks_warns(tmp_path, capsys):
    d = write_synthetic_run(str(tmp_path / "r"), ranks=4, ops_per_rank=20, missing_ranks=(1, 3))
    assert cli("report", d) == 0
    cap = capsys.readouterr()
    assert "ranks missing: 1,3 of 4" in cap.err
    assert "ranks      2 of 4" in cap.out


def test_bad_time_and_export_path(syn_run, tmp_path):
    assert_one_line_error(run_cli_subprocess("report", syn_run, "--from", "soon"), "bad time")
    assert_one_line_error(run_cli_subprocess("report", syn_run, "--csv", tmp_path / "no" / "x.csv"), "does not exist")


def test_hostile_strings_are_escaped(tmp_path, capsys):
    d = write_hostile_run(tmp_path / "h")
    assert cli("report", d, "--events") == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "[bold red]evil[/]" in out  # shown literally, not interpreted
    assert "\\x1b[31mred" in out
    js = tmp_path / "s.json"
    assert cli("report", d, "--json", js, "--csv", tmp_path / "o.csv", "-q") == 0
    json.loads(js.read_text())


def test_every_op_record_corrupt_is_not_silence(tmp_path):
    """Meta files fine, every op record corrupt: not "no communication" but what was unreadable, exit 1."""
    d = write_synthetic_run(str(tmp_path / "r"), ranks=2, ops_per_rank=20, annotate=False)
    for ops in glob.glob(os.path.join(d, "*.ops.bin")):
        rec = np.fromfile(ops, dtype=schema.OP_RECORD)
        rec["status"] = 77                     # no writer writes this
        rec.tofile(ops)
    page = tmp_path / "r.html"
    proc = run_cli_subprocess("report", d, "--html", page)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "No readable communication: 40 op record(s) could not be read." in proc.stdout
    assert "No communication was recorded" not in proc.stdout
    html = page.read_text()   # the page says what the terminal says
    assert "No readable communication: 40 op record(s) could not be read." in html
    assert "No communication was recorded" not in html
    assert proc.stderr.strip().splitlines()[-1].startswith("commtrace: unreadable trace data left out")


@pytest.mark.parametrize("exit_code", [0, 1])
def test_no_process_made_a_group(tmp_path, exit_code):
    """Only start files (processes that ended before init_process_group): exit 2, pointing at check,
    and check says so, with how each process ended (it said only "no problems found")."""
    for pid in (11, 12):
        w = TraceWriter(str(tmp_path), f"proc.h.pid{pid}")
        w.write([{"type": "header", "format": "commtrace", "version": 1, "host": "h", "pid": pid, "rank": None,
                  "run_id": "r", "command": ["train.py"], "t_wall_ns": 1, "t_mono_ns": 1},
                 {"type": "end", "exit_code": exit_code, "how": "exit", "t_mono_ns": 5}], None)
        w.close()
    assert_one_line_error(run_cli_subprocess("report", tmp_path), "no process created a process group (2 process(es)")
    proc = run_cli_subprocess("check", tmp_path, "--json")
    assert proc.returncode == exit_code                 # a process that exited 1 is an error of its own
    findings = json.loads(proc.stdout)["findings"]
    summary = [f for f in findings if f["title"].startswith("no process created a process group: 2 process(es)")]
    if exit_code:       # what went wrong is the finding
        assert summary == [] and findings[0]["title"].endswith("exited with code 1") and findings[0]["kind"] == "no_group"
    else:
        assert len(findings) == 1 and len(summary) == 1 and summary[0]["severity"] == "info"
        assert [p["exit_code"] for p in summary[0]["data"]["processes"]] == [0, 0]


def test_load_unknown_table_names_every_table(syn_run):
    """commtrace.load's error lists every table it serves, steps included."""
    import pytest

    import commtrace
    from commtrace.errors import CommtraceError
    with pytest.raises(CommtraceError) as err:
        commtrace.load(syn_run, table="step")
    assert str(err.value) == "table 'step': unknown (one of ops, spans, marks, regions, counts, steps)"


def test_folder_of_runs_lists_them(tmp_path):
    """`report commtrace-out` (the parent of runs) names the runs in it, newest first, for every command."""
    for i, name in enumerate(("old", "new")):
        write_synthetic_run(str(tmp_path / name), ranks=2, ops_per_rank=20, seed=i)
        os.utime(tmp_path / name, (1000 + i, 1000 + i))
    want = f"a folder of 2 runs, not a run; give one of them (newest first): {tmp_path / 'new'}, {tmp_path / 'old'}"
    for argv in (["report", tmp_path], ["check", tmp_path], ["compare", tmp_path / "old", tmp_path]):
        assert_one_line_error(run_cli_subprocess(*argv), want)


def test_step_window_beyond_the_run_says_what_it_has(tmp_path):
    """--steps past the run's last step is exit 2 naming the run's steps, not exit 0 "No communication
    was recorded". 3 start-up ops + 4 steps of 5 ops (4 buckets + 1 all_gather) = 23 ops: steps 1..4."""
    run = write_synthetic_run(str(tmp_path / "run"), ranks=2, ops_per_rank=23, seed=0)
    other = write_synthetic_run(str(tmp_path / "other"), ranks=2, ops_per_rank=23, seed=1)
    assert_one_line_error(run_cli_subprocess("report", run, "--steps", "9:12"), "--steps 9:12: the run has steps 1..4")
    assert_one_line_error(run_cli_subprocess("report", run, "--skip-steps", "4"), "--skip-steps 4: the run has steps 1..4")
    assert_one_line_error(run_cli_subprocess("report", run, "--steps", "9:", "--partitioned"),
                          "--steps 9:: the run has steps 1..4")
    assert_one_line_error(run_cli_subprocess("compare", run, other, "--steps", "5"),
                          f"{run}: --steps 5: the run has steps 1..4")
    proc = run_cli_subprocess("report", run, "--steps", "4:12")     # overlaps: step 4 is shown
    assert proc.returncode == 0 and "steps 4..12" in proc.stdout, proc.stdout + proc.stderr


def test_quiet_with_nothing_to_write(syn_run, tmp_path):
    """-q alone prints no report and writes no file: one line says so (the exit code is still the
    damage verdict: 0 here); with an export, nothing is said."""
    from commtrace.cli.cmd_report import QUIET_ALONE
    for engine in ([], ["--partitioned"]):
        proc = run_cli_subprocess("report", syn_run, "-q", *engine)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", QUIET_ALONE + "\n")
        proc = run_cli_subprocess("report", syn_run, "-q", "--json", tmp_path / "s.json", *engine)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_unknown_options_name_the_closest(syn_run):
    """A typo in report/compare/check's options is exit 2 with one line naming the option meant."""
    assert_one_line_error(run_cli_subprocess("report", syn_run, "--stps", "3"),
                          "report: unknown option --stps (did you mean --steps?)")
    assert_one_line_error(run_cli_subprocess("compare", syn_run, syn_run, "--jsn=x.json"),
                          "compare: unknown option --jsn (did you mean --json?)")
    assert_one_line_error(run_cli_subprocess("check", syn_run, "-z"), "check: unknown option -z (commtrace check -h")
    assert_one_line_error(run_cli_subprocess("check", syn_run, "extra"), "check: unexpected argument 'extra'")
    assert_one_line_error(run_cli_subprocess("reprot", syn_run), "unknown command 'reprot' (did you mean report?)")
