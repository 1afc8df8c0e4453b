"""How ``commtrace run`` treats the traced program: exit codes, exceptions, signals, script semantics."""
from __future__ import annotations

import json
import os
import signal

import pytest

import helpers as h
from helpers import WORKERS, worker


def _single(tmp_path, mode, n=3, after_start=None, timeout=60):
    run_dir = tmp_path / "run"
    res = h.run(h.commtrace_cmd(run_dir, worker("single.py"), h.free_port(), mode, n),
                timeout=timeout, after_start=after_start)
    return res, run_dir


def test_exit_code_propagates(tmp_path):
    res, run_dir = _single(tmp_path, "exit3")
    res.check(3)
    df = h.load(run_dir)
    assert df["bytes"].tolist() == [4, 8, 12]
    (proc,) = df.attrs["processes"]
    assert proc["end"]["exit_code"] == 3


def test_os_exit_keeps_every_op_and_the_exit_code(tmp_path):
    """os._exit skips atexit; the ops of the last flush interval (here: all of
    them) must reach the trace all the same, with the exit code."""
    res, run_dir = _single(tmp_path, "osexit")
    res.check(4)
    df = h.load(run_dir)
    assert df["bytes"].tolist() == [4, 8, 12]
    (proc,) = df.attrs["processes"]
    assert proc["end"]["exit_code"] == 4 and proc["end"]["how"] == "exit"


def test_uncaught_exception_printed_like_python_and_stored(tmp_path):
    res, run_dir = _single(tmp_path, "raise")
    res.check(1)
    err = res.stderr
    assert "Traceback (most recent call last):" in err
    assert 'single.py", line' in err and "in fail" in err and "in main" in err
    # the traceback, then commtrace's one line on where the trace went
    body, last = err.rstrip().rsplit("\n", 1)
    assert body.endswith("ValueError: boom after 3 ops")
    assert last == f"commtrace: trace written to {run_dir} (commtrace check {run_dir})"
    tb = err[err.index("Traceback (most recent call last):"):]
    assert "commtrace" + os.sep not in tb and "runpy" not in tb, tb
    # printed through sys.excepthook, as python does: torch's (init_process_group installs
    # one) prefixes every line with [rank0]; the text is what python prints untraced
    assert "[rank0]: Traceback (most recent call last):" in err
    plain = h.run([h.PY, worker("single.py"), h.free_port(), "raise", 3])
    assert plain.stderr.startswith(body + "\n"), plain.stderr  # (torch may add a teardown abort after it)
    df = h.load(run_dir)
    (proc,) = df.attrs["processes"]
    exc = proc["exception"]
    assert exc["exc_type"] == "ValueError"
    assert "ValueError: boom after 3 ops" in exc["text"] and "in fail" in exc["text"]
    assert proc["end"]["exit_code"] == 1
    assert len(df) == 3


def test_sigkill_keeps_ops_completed_before(tmp_path):
    res, run_dir = _single(tmp_path, "sigkill", n=4)
    assert not res.timed_out
    assert res.returncode == -signal.SIGKILL
    df = h.load(run_dir)
    # the flush thread wrote the completed ops (the script waits for them on disk): the kill loses none
    assert df["bytes"].tolist() == [4, 8, 12, 16]
    assert set(df["status"]) == {"completed"}
    assert any("no end record" in s or "abrupt" in s for s in df.attrs["incomplete"]), df.attrs["incomplete"]
    assert df.attrs["processes"][0]["end"] is None


def test_sigterm_flushes_everything(tmp_path):
    def term_when_ready(proc):
        line = proc.stdout.readline()
        while line.startswith("[Gloo]"):  # torch 2.8's gloo reports its connections on stdout
            line = proc.stdout.readline()
        assert line.strip() == "ready", line
        proc.send_signal(signal.SIGTERM)  # right after the last op: nothing flushed yet by the timer
    res, run_dir = _single(tmp_path, "sigterm", n=5, after_start=term_when_ready)
    assert not res.timed_out, res.stderr
    assert res.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
    df = h.load(run_dir)
    assert df["bytes"].tolist() == [4, 8, 12, 16, 20]
    end = df.attrs["processes"][0]["end"]
    assert end is not None and end["how"] == "signal"


def test_script_semantics(tmp_path):
    out = tmp_path / "sem.json"
    script = worker("semantics.py")
    h.run(h.commtrace_cmd(tmp_path / "run", script, out, "--flag", "x y"), cwd=str(tmp_path)).check(0)
    got = json.loads(out.read_text())
    assert got["name"] == "__main__"
    assert got["argv"] == [script, str(out), "--flag", "x y"]
    assert os.path.samefile(got["path0"], WORKERS)
    assert got["sibling"] == "sibling-imported"


def test_script_globals_as_python_sets_them(tmp_path):
    """__file__ and the code's file name are absolute as python makes them (cwd
    joined, not normalized), argv[0] stays as given, and __loader__, __package__,
    __spec__, __builtins__ are what python gives a script (runpy.run_path differs)."""
    got = {}
    for traced in (False, True):
        out = tmp_path / "sem.json"
        args = ["./semantics.py", out, "a"]
        cmd = h.commtrace_cmd(tmp_path / "run", *args) if traced else [h.PY, *args]
        h.run(cmd, cwd=WORKERS).check(0)
        got[traced] = json.loads(out.read_text())
    assert got[True] == got[False]
    assert got[True]["file"] == os.path.join(WORKERS, "./semantics.py") == got[True]["code_file"]
    assert got[True]["argv"][0] == "./semantics.py" and got[True]["loader"][0] == "SourceFileLoader"


def test_tracebacks_show_no_commtrace_frames(tmp_path):
    """Errors raised through the torch functions commtrace wraps (backward, object
    collectives, group creation, a spawned rank's function, a blocking collective
    whose work fails) print the same traceback traced, by either wrapper, and untraced."""
    def launch(how):
        args = [worker("tracebacks.py"), h.free_port()]
        env = h.clean_env(**({"COMMTRACE_NATIVE": "0"} if how == "python" else {}))
        res = h.run(h.commtrace_cmd(tmp_path / how, *args) if how != "plain" else [h.PY, *args], env=env, timeout=90)
        return res.check(0).stdout
    hows = ("plain", "native", "python")  # untraced; traced by either wrapper (independent: at once)
    out = dict(zip(hows, h.concurrently(*(lambda how=how: launch(how) for how in hows))))
    assert out["plain"].count("Traceback (most recent call last)") == 7, out["plain"]
    assert "work.wait()" in out["plain"]
    for how in ("native", "python"):
        assert os.path.join(h.REPO, "commtrace") + os.sep not in out[how]  # no frame of the package's
        assert out[how] == out["plain"], how
        # the failed collectives, blocking and async, each recorded with its error
        df = h.load(tmp_path / how).sort_values("t_start_ns")
        assert df["status"].astype(str).tolist() == ["failed", "failed"], how
        assert df["bytes"].tolist() == [8, 12]
        assert all("Cannot use ReduceOp.PREMUL_SUM with Gloo" in str(e) for e in df["error"]), (how, df["error"])


def test_keyboard_interrupt_ends_by_sigint_as_python(tmp_path):
    """Python ends a script that raised KeyboardInterrupt by SIGINT (after atexit):
    launchers see the signal, not an exit code; the trace records it."""
    script = tmp_path / "ki.py"
    script.write_text("import atexit\natexit.register(print, 'atexit ran')\nraise KeyboardInterrupt\n")
    plain = h.run([h.PY, script])
    res = h.run(h.commtrace_cmd(tmp_path / "run", script))
    assert plain.returncode == res.returncode == -signal.SIGINT
    assert res.stdout == plain.stdout == "atexit ran\n"
    (meta,) = [f for f in os.listdir(tmp_path / "run") if f.endswith(".meta.jsonl")]
    assert '"type":"end","exit_code":130,"how":"exception"' in (tmp_path / "run" / meta).read_text()


def test_directory_with_main_runs_as_python_runs_it(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text("import sys\nprint(__name__, sys.argv[1:])\nsys.exit(5)\n")
    plain = h.run([h.PY, app, "x"])
    res = h.run(h.commtrace_cmd(tmp_path / "run", app, "x"))
    res.check(5)
    assert res.stdout == plain.stdout == "__main__ ['x']\n" and plain.returncode == 5


def test_module_with_relative_imports(tmp_path):
    out = tmp_path / "mod.json"
    h.run([h.PY, "-m", "commtrace", "run", "-o", tmp_path / "run", "-m", "ctpkg.main", "-v", out],
          cwd=WORKERS).check(0)
    got = json.loads(out.read_text())
    assert got["name"] == "__main__" and got["package"] == "ctpkg"
    assert got["value"] == "relative-import-ok" and got["same"]
    assert got["argv"][1:] == ["-v", str(out)]


def test_target_flags_are_not_runs_own(tmp_path):
    """Flags after the script or -m MODULE belong to it, even -o/-m/-p (python -m pytest -p ...)."""
    out = tmp_path / "mod.json"
    h.run([h.PY, "-m", "commtrace", "run", f"--output={tmp_path / 'run'}", "-mctpkg.main", "-p", "no:x",
           "-o", "mine", "-m", "also-mine", "--", out], cwd=WORKERS).check(0)
    assert json.loads(out.read_text())["argv"][1:] == ["-p", "no:x", "-o", "mine", "-m", "also-mine", "--", str(out)]


def test_split_run_argv():
    from commtrace.cli import split_run_argv
    assert split_run_argv(["-o", "d", "train.py", "-o", "x"]) == (["-o", "d"], ["train.py", "-o", "x"])
    assert split_run_argv(["--hang-timeout=5", "--abort-on-hang", "-m", "pytest", "-p", "no:x"]) == (
        ["--hang-timeout=5", "--abort-on-hang", "-m", "pytest"], ["-p", "no:x"])
    assert split_run_argv(["-odir", "--", "s.py"]) == (["-odir"], ["--", "s.py"])
    assert split_run_argv([]) == ([], [])
    # an abbreviation is spelt out, as argparse would read it
    assert split_run_argv(["--keep=5", "--hang", "3", "s.py"]) == (["--keep-last=5", "--hang-timeout", "3"], ["s.py"])


def test_unknown_run_option_is_an_option_not_the_script(tmp_path):
    """A typo in run's options is exit 2 naming the option it resembles, not "no such file";
    the same spelling after the script is the script's."""
    proc = h.run([h.PY, "-m", "commtrace", "run", "--keep-lst", "5", "x.py"], cwd=str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown option --keep-lst (did you mean --keep-last?)" in lines[0], proc.stderr
    proc = h.run([h.PY, "-m", "commtrace", "run", "-x", "x.py"], cwd=str(tmp_path))
    assert proc.returncode == 2 and "unknown option -x" in proc.stderr, proc.stderr
    out = tmp_path / "argv.json"
    script = tmp_path / "s.py"
    script.write_text("import json, sys\njson.dump(sys.argv[1:], open(sys.argv[-1], 'w'))\n")
    h.run([h.PY, "-m", "commtrace", "run", "-o", tmp_path / "run", script, "--keep-lst", "5", out]).check(0)
    assert json.loads(out.read_text()) == ["--keep-lst", "5", str(out)]


@pytest.mark.parametrize("option, value", [("--keep-last", "0"), ("--steps", "zz")])
def test_bad_bounded_option_is_one_line_naming_it(tmp_path, option, value):
    """A bad bounded-mode value is exit 2 with one line naming the option as typed."""
    proc = h.run([h.PY, "-m", "commtrace", "run", option, value, "x.py"], cwd=str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"run: {option} '{value}': expected" in lines[0], proc.stderr
    assert not (tmp_path / "commtrace-out").exists()
