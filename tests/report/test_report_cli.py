"""commtrace report / compare end to end, on a real traced run and on synthetic runs."""
import json
import os
import re

import pandas as pd
import pytest

import commtrace
from synthetic import write_synthetic_run

from .conftest import cli

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "synthetic_report.txt")


def test_real_run_report(real_run, capsys):
    assert cli("report", real_run, "--width", "120") == 0
    out, err = capsys.readouterr()
    assert "\x1b[" not in out  # not a TTY: plain text
    assert re.search(r"ranks\s+2 of 2", out)
    assert re.search(r"backends\s+gloo", out)
    for op in ("all_reduce", "broadcast", "barrier", "all_gather"):
        assert op in out
    assert "Arrival skew" in out and "Timeline" in out
    assert "rank 0 |" in out and "rank 1 |" in out
    assert err == ""


def test_real_run_json_counts_match_frame(real_run, tmp_path, capsys):
    js = tmp_path / "s.json"
    assert cli("report", real_run, "--json", js, "-q") == 0
    data = json.loads(js.read_text())
    df = commtrace.load(real_run)
    assert data["run"]["ops"] == len(df)
    assert data["run"]["ranks"] == 2
    by_op = {r["op"]: r for r in data["by_op"]}
    assert sum(r["ops"] for r in by_op.values()) == len(df)
    assert by_op["all_reduce"]["ops"] == int((df["op"] == "all_reduce").sum())
    # Every collective was called by both ranks: collectives = ops / 2.
    assert by_op["all_reduce"]["collectives"] * 2 == by_op["all_reduce"]["ops"]
    # Steps: the script trains 4 optimizer steps (spawn_ddp.py); every step's
    # communication fits in it.
    assert [s["step"] for s in data["steps"]] == [1, 2, 3, 4]
    for s in data["steps_per_rank"]:
        assert s["exposed_ns"] <= s["comm_ns"] <= s["step_ns"]
    assert 0 < data["run"]["comm_share"]["min"] <= data["run"]["comm_share"]["max"] <= 1
    assert data["skew"]["instances"] > 0


def test_csv_parquet_one_row_per_op(real_run, tmp_path):
    c, p = tmp_path / "o.csv", tmp_path / "o.parquet"
    assert cli("report", real_run, "--csv", c, "--parquet", p, "-q") == 0
    df = commtrace.load(real_run)
    assert len(pd.read_csv(c)) == len(df)
    back = pd.read_parquet(p)
    assert len(back) == len(df) and list(back.columns) == list(df.columns)


def test_events_and_zoom(syn_run, capsys):
    assert cli("report", syn_run, "--events", "--from", "1ms", "--to", "3ms", "--width", "100") == 0
    out = capsys.readouterr().out
    m = re.search(r"Events \(([\d,]+) ops", out)
    n = int(m.group(1).replace(",", ""))
    df = commtrace.load(syn_run)
    rel = df["t_start_ns"] - df["t_start_ns"].min()
    assert n == int(((rel >= 1_000_000) & (rel <= 3_000_000)).sum()) > 0
    assert "Timeline  1.00 ms .. 3.00 ms" in out


def test_slow_rank_is_top_straggler(syn_run, tmp_path):
    js = tmp_path / "s.json"
    assert cli("report", syn_run, "--json", js, "-q") == 0
    data = json.loads(js.read_text())
    assert data["skew"]["stragglers"][0]["rank"] == 2
    phases = {r["phase"] for r in data["by_phase"]}
    assert {"backward", "eval", "init", "pipeline"} <= phases
    assert len(data["steps"]) > 5


def test_golden_synthetic_report_80_columns(tmp_path, capsys):
    """At 80 columns nothing is cut: tables drop columns instead (the golden file
    shows which), and no line is wider than 80. The banner's title and run path
    (one line, or wrapped over several: it depends on the temporary directory's
    length) read "commtrace report <RUN>"."""
    d = write_synthetic_run(str(tmp_path / "golden-run"), ranks=4, ops_per_rank=120, seed=7, slow_rank=1)
    assert cli("report", d, "--width", "80") == 0
    lines = capsys.readouterr().out.splitlines(keepends=True)
    command = next(i for i, line in enumerate(lines) if line.startswith("  command"))
    assert "".join(lines[:command]).replace("\n", "") == "commtrace report " + d
    out = "".join(["commtrace report <RUN>\n", *lines[command:]])
    if os.environ.get("UPDATE_GOLDEN"):
        with open(GOLDEN, "w") as f:
            f.write(out)
    with open(GOLDEN) as f:
        assert out == f.read()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "~" not in out and "…" not in out   # no shortened cell


def test_colour_and_plain_are_the_same_text(tmp_path, monkeypatch):
    """Colour only adds styles: the same characters, the same width, ops told apart by letter."""
    import io
    import re as re_

    from commtrace.analysis.partitioned import analyse
    from commtrace.render.terminal import make_console, render_report

    class FakeTTY(io.StringIO):
        def isatty(self):
            return True

    d = write_synthetic_run(str(tmp_path / "r"), ranks=4, ops_per_rank=120, seed=7, slow_rank=1)
    rep = analyse(d, timeline_width=80)
    outs = []
    for no_color in ("", "1"):
        monkeypatch.setenv("NO_COLOR", no_color) if no_color else monkeypatch.delenv("NO_COLOR", raising=False)
        monkeypatch.setenv("COLUMNS", "80")
        tty = FakeTTY()
        render_report(make_console(None, tty), rep)
        outs.append(tty.getvalue())
    coloured, plain = outs
    assert "\x1b[" in coloured and "\x1b[" not in plain
    assert re_.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain
    assert "RRRR" in plain


def test_compare_cli(syn_run, tmp_path, capsys):
    other = write_synthetic_run(str(tmp_path / "exp"), ranks=4, ops_per_rank=300, seed=2, buckets=2)
    js = tmp_path / "c.json"
    assert cli("compare", syn_run, other, "--json", js, "--width", "140") == 0
    out = capsys.readouterr().out
    assert "BASE" in out and "EXP1" in out and "step time" in out and "busbw" in out
    data = json.loads(js.read_text())
    assert data["by"] == ["phase", "op"]
    row = next(r for r in data["rows"] if r["op"] == "all_reduce")
    b, e = row[data["runs"][0]], row[data["runs"][1]]
    assert e["mean_ns_delta"] == pytest.approx((e["mean_ns"] - b["mean_ns"]) / b["mean_ns"] * 100)
    assert e["collectives_delta"] == pytest.approx((e["collectives"] - b["collectives"]) / b["collectives"] * 100)
    st = data["steps"][data["runs"][1]]["step_ns"]
    base = data["steps"][data["runs"][0]]["step_ns"]
    assert st["delta_pct"] == pytest.approx((st["median"] - base["median"]) / base["median"] * 100)


def test_compare_by_unknown_column(syn_run, capsys):
    assert cli("compare", syn_run, syn_run, "--by", "nope") == 2
    err = capsys.readouterr().err
    assert err.startswith("commtrace: error: --by nope: not a column to group by") and err.count("\n") == 1


def test_console_colour_only_on_tty_without_no_color(monkeypatch, syn_run):
    import io

    from commtrace.analysis.partitioned import analyse
    from commtrace.render.terminal import make_console, render_report

    class FakeTTY(io.StringIO):
        def isatty(self):
            return True

    rep = analyse(syn_run, timeline_width=100)
    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = FakeTTY()
    render_report(make_console(100, tty), rep)
    assert "\x1b[" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    tty = FakeTTY()
    render_report(make_console(100, tty), rep)
    assert "\x1b[" not in tty.getvalue() and "R all_reduce" in tty.getvalue()


def test_default_run_is_newest(tmp_path, monkeypatch, capsys):
    base = tmp_path / "commtrace-out"
    old = write_synthetic_run(str(base / "old"), ranks=2, ops_per_rank=10)
    write_synthetic_run(str(base / "new"), ranks=3, ops_per_rank=10)
    os.utime(old, (1, 1))
    monkeypatch.chdir(tmp_path)
    assert cli("report") == 0
    out = capsys.readouterr().out
    banner = "".join(out.split("ranks")[0].split())  # the run's path may wrap on a narrow terminal
    assert "commtrace-out/new" in banner and "ranks      3 of 3" in out
