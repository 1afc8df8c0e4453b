"""Steps on real traced DDP runs: accumulation (no_sync), evaluation forwards, ops after the loop."""
import json

from .conftest import cli


def test_accumulation_steps_are_optimizer_steps(accum_run, tmp_path):
    js = tmp_path / "s.json"
    assert cli("report", accum_run, "--json", js, "-q") == 0
    data = json.loads(js.read_text())
    steps = data["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]          # 8 forwards, 4 optimizer steps
    assert all(s["micro_steps"] == 2 and s["ranks"] == 2 for s in steps)
    for s in data["steps_per_rank"]:
        assert 0 <= s["exposed_ns"] <= s["comm_ns"] <= s["step_ns"]
        assert s["compute_ns"] + s["exposed_ns"] <= s["step_ns"]
        assert s["ops"] >= 1                                  # at least the gradient bucket
    out = {o["where"]: o for o in data["outside_steps"]}
    # after the loop: barrier + all_gather_object's two all_gathers, on both ranks
    assert out["after the last step"]["ops"] == 6
    assert out["before the first step"]["ops"] >= 4           # DDP construction on both ranks


def test_accumulation_window_and_text(accum_run, capsys):
    assert cli("report", accum_run, "--skip-steps", "1", "--width", "80") == 0
    out = capsys.readouterr().out
    assert "window     steps 2..last" in out
    assert "3 of 4 optimizer steps shown, 2 micro-steps each" in out
    assert max(len(line) for line in out.splitlines()) <= 80
