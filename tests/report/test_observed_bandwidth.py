"""The summary tables say when a bandwidth includes collectives whose end was observed by polling
(an upper bound on their time: the bandwidth is a lower bound): ``observed`` in --json, a ``*``
after busbw/algbw and a footnote in the terminal. Before, the terminal showed gloo's send/recv
bandwidth as any other (the HTML figure alone flagged it). A real 2-rank gloo run (send/recv:
observed ends; the collectives: exact), both engines."""
from __future__ import annotations

import json
import re

import pytest

OBSERVED_MARK = "*"   # render.terminal.OBSERVED_MARK
from report.conftest import cli
from helpers import commtrace_main


@pytest.mark.parametrize("engine", [[], ["--partitioned"]])
def test_observed_ends_are_marked_in_the_tables(real_run, tmp_path, engine):
    import commtrace
    df = commtrace.load(real_run)
    observed = set(df.loc[df["end_observed"], "op"].astype(str))
    assert observed == {"send", "recv"}, observed
    out = tmp_path / "r.json"
    assert cli("report", real_run, "-q", "--json", out, *engine) == 0
    rows = {r["op"]: r for r in json.loads(out.read_text())["by_op"]}
    assert {op: rows[op]["observed"] for op in ("send", "recv", "all_reduce")} == \
        {"send": rows["send"]["collectives"], "recv": rows["recv"]["collectives"], "all_reduce": 0}
    assert all(r["untimed"] == 0 for r in rows.values())
    text = commtrace_main("report", real_run, "--width", "200", *engine).stdout
    table = text[text.index("Per op"):].split("\n\n")[0]
    lines = {ln.split()[0]: ln for ln in table.splitlines()[3:] if ln.split()}
    for op in ("send", "recv"):      # busbw and algbw, both marked
        assert re.findall(r"B/s\S*", lines[op]) == ["B/s" + OBSERVED_MARK] * 2, lines[op]
    assert re.findall(r"B/s\S*", lines["all_reduce"]) == ["B/s"] * 2, lines["all_reduce"]
    assert f"{OBSERVED_MARK}: includes collectives whose end was observed by polling" in " ".join(table.split())
