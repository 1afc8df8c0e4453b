"""The one --steps syntax (trace/step_range.py): what it accepts and refuses, and that
`commtrace run` (bounded mode) and `commtrace report` read it through the same parser."""
from __future__ import annotations

import pytest

from commtrace.analysis.window import Window
from commtrace.capture.bounded import make_options
from commtrace.cli import main
from commtrace.errors import CommtraceError
from commtrace.trace.step_range import StepRange, parse_steps

GOOD = {"10:20": StepRange(10, 20), " 7 : 9 ": StepRange(7, 9), "5": StepRange(5, 5), "3:": StepRange(3, None),
        ":8": StepRange(None, 8), "1:1": StepRange(1, 1), "every:3": StepRange(every=3), " every : 2 ": StepRange(every=2)}
BAD = ("0:3", "5:2", ":0", "0", "every:0", "x", "10-20", "", ":", " ", "1:2:3", "every:", "every", "every:x", "-1:3",
       "2.5", "every:2:4")


def test_accepted_forms_and_their_text():
    for text, want in GOOD.items():
        assert parse_steps(text) == want, text
        assert parse_steps(str(want)) == want, text          # the header's text reads back the same
    assert str(parse_steps("5")) == "5:5" and str(parse_steps("3:")) == "3:" and str(parse_steps(":8")) == ":8"


def test_refused_forms_say_what_is_accepted():
    for text in BAD:
        with pytest.raises(ValueError) as e:
            parse_steps(text)
        msg = str(e.value)
        assert repr(text) in msg and "\n" not in msg, msg
        assert ("A:B" in msg) or ("A <= B" in msg) or ("at least 1" in msg), msg


def test_run_and_report_take_the_same_ranges():
    for text, want in GOOD.items():
        assert make_options(None, text).steps == want, text
        if not want.every:
            assert Window.from_args(steps=text).steps == (want.first, want.last), text
    for text in (t for t in BAD if t):                       # "" is no option at all (an empty variable)
        with pytest.raises(ValueError, match="steps"):
            make_options(None, text)
        with pytest.raises(CommtraceError, match="--steps"):
            Window.from_args(steps=text)
    assert make_options(None, "") is None and Window.from_args(steps="").steps is None


def test_report_refuses_every_k_in_one_line():
    with pytest.raises(CommtraceError) as e:
        Window.from_args(steps="every:4")
    assert "one range of steps" in str(e.value) and "commtrace run" in str(e.value)


def test_run_option_errors_are_one_line_exit_2(tmp_path, capsys):
    for text in ("x", "5:2", "every:0"):
        assert main(["run", "-o", str(tmp_path / "r"), "--steps", text, str(tmp_path / "never_run.py")]) == 2
        err = capsys.readouterr().err
        assert f"run: --steps {text!r}" in err and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()
