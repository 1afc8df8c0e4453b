"""compare's noise band, the region table, marks (hand-computed; see scenarios.py)."""
import json
import math

import pytest

import commtrace
from commtrace.analysis.compare import compare_reports, spread_stats
from commtrace.analysis.partitioned import analyse
from commtrace.cli import main

import scenarios

US = 1000


def rep(d, **kw):
    from commtrace.analysis.window import Window
    return analyse(d, window=Window.from_args(**kw), op_view=True)


def test_spread_is_half_the_interquartile_range():
    st = spread_stats([10, 20, 30, 40])
    assert (st["median"], st["p25"], st["p75"], st["spread"]) == (25, 17.5, 32.5, 7.5)


def test_compare_step_delta_and_noise_band(tmp_path):
    a = rep(scenarios.step_times(tmp_path / "a", [10, 20, 30, 40]))
    b = rep(scenarios.step_times(tmp_path / "b", [20, 30, 40, 50]))
    c = rep(scenarios.step_times(tmp_path / "c", [80, 81, 82, 83]))
    cmp = compare_reports([("a", a), ("b", b), ("c", c)])
    st = cmp["steps"]
    assert st.loc[("a", "step_ns"), "median"] == 25 * US and st.loc[("a", "step_ns"), "spread"] == 7.5 * US
    b_row = st.loc[("b", "step_ns")]
    assert b_row["delta_pct"] == pytest.approx(40.0)                         # (35 - 25) / 25
    assert b_row["band_pct"] == pytest.approx(100 * math.hypot(7.5, 7.5) / 25)   # 42.4 %
    assert bool(b_row["within_noise"])
    c_row = st.loc[("c", "step_ns")]                                        # median 81.5, spread 0.75
    assert c_row["delta_pct"] == pytest.approx((81.5 - 25) / 25 * 100)
    assert c_row["band_pct"] == pytest.approx(100 * math.hypot(7.5, 0.75) / 25)
    assert not bool(c_row["within_noise"])
    # comm per step: one 2 us blocking all_reduce in every step, 1 op of 100 B
    assert st.loc[("c", "comm_ns"), "median"] == 2 * US and st.loc[("c", "comm_ns"), "delta_pct"] == 0
    assert st.loc[("b", "ops"), "median"] == 1 and st.loc[("b", "bytes"), "median"] == 100


def test_compare_cli_json_and_by_keys(tmp_path, capsys):
    a = scenarios.step_times(tmp_path / "a", [10, 20, 30, 40])
    b = scenarios.step_times(tmp_path / "b", [20, 30, 40, 50])
    for by in ("op,bucket", "root", "tag", "op,phase,detail", "rank", "dtype,async"):
        assert main(["compare", a, b, "--by", by, "--json", "-"]) == 0, by
        data = json.loads(capsys.readouterr().out)
        assert data["by"] == by.split(",")
    assert main(["compare", a, b, "--by", "t_start_ns"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commtrace: error: --by t_start_ns: not a column to group by") and err.count("\n") == 1
    assert main(["compare", a, b, "--width", "80"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "(+40.0% ±42.4%)" in out                                          # within the noise band


def test_region_table(tmp_path):
    r = rep(scenarios.regions(tmp_path / "r")).regions
    ev = r.loc["eval"]
    assert (ev["ranks"], ev["entries"], ev["time_ns"], ev["comm_ns"], ev["ops"]) == (2, 3, 20 * US, 7 * US, 3)
    assert ev["comm_share"] == pytest.approx(0.35)
    inner = r.loc["eval/inner"]
    assert (inner["ranks"], inner["time_ns"], inner["comm_ns"], inner["ops"]) == (1, 4 * US, 2 * US, 1)


def test_marks_table_timeline_and_load(tmp_path, capsys):
    d = scenarios.regions(tmp_path / "r")
    marks = commtrace.load(d, table="marks")
    assert list(marks["label"]) == ["epoch 1", "epoch 2"] and list(marks["rank"]) == [0, 0]
    regions = commtrace.load(d, table="regions")
    assert sorted(regions["label"]) == ["eval", "eval", "eval", "eval/inner"]
    assert main(["report", d, "--width", "80"]) == 0
    out = capsys.readouterr().out
    lane = next(line for line in out.splitlines() if line.startswith("marks  |"))
    assert lane.count("1") == 1 and lane.count("2") == 1 and lane.index("1") < lane.index("2")
    assert "marks (rank 0): 1 epoch 1 (1.0 us)   2 epoch 2 (19.0 us)" in out   # after the first op (2 us)
    assert "Regions (commtrace.region)" in out
    with pytest.raises(commtrace.errors.CommtraceError):
        commtrace.load(d, table="nope")


def test_bad_windows_are_one_line_errors(tmp_path, capsys):
    d = scenarios.step_times(tmp_path / "a", [10, 20])
    for args, text in ((["--steps", "x"], "--steps 'x'"), (["--steps", "3:1"], "A <= B"),
                       (["--phase", "backwards"], "--phase backwards: no op of this run has that phase"),
                       (["--from", "2s", "--to", "1s"], "is not after"), (["--skip-steps", "-1"], "0 or more")):
        assert main(["report", d, *args]) == 2, args
        err = capsys.readouterr().err
        assert text in err and err.count("\n") == 1, err


def test_window_outside_every_step_says_so(tmp_path, capsys):
    d = scenarios.step_times(tmp_path / "a", [10, 20])
    assert main(["report", d, "--steps", "5:9"]) == 2      # what the run has (2 steps), not an empty report
    assert capsys.readouterr().err == "commtrace: error: --steps 5:9: the run has steps 1..2\n"
    assert main(["report", d, "--from", "100s"]) == 0      # a time window past the run: shown empty
    out = capsys.readouterr().out
    assert "No communication was recorded in this window." in out
