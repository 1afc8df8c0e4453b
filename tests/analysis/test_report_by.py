"""``report --by COLS`` (one more summary table, compare's breakdown of one run) and
``compare --by module / mesh_dim``, hand-computed, on one frame and partitioned.

Two ranks, the same ops on each (µs); group 0 is mesh dimension ``dp`` (a ``mesh``
line), group 1 ``tp`` (torch's ``mesh_tp`` description):

==============  =====  =======  ===========  =========  =====
op              group  time     module       phase      bytes
==============  =====  =======  ===========  =========  =====
all_gather      0      10..20   layers.0     forward    64
all_reduce      1      30..40   layers.0.up  forward    16
all_reduce      1      50..70   layers.0.up  backward   16
all_reduce      0      80..90   -            optimizer  8
==============  =====  =======  ===========  =========  =====

By mesh_dim: dp 2 collectives, 4 ops, 144 B, every op 10 µs (mean 10); tp 2
collectives, 4 ops, 64 B, 10 and 20 µs per rank (mean 15).
By module, mesh_dim: (layers.0, dp) 1 collective, 128 B, mean 10; (layers.0.up, tp)
2, 64 B, mean 15; (-, dp) 1, 16 B, mean 10. By module, phase: the optimizer's
all_reduce is (-, optimizer).
"""
import json

import pytest

from commtrace.cli import main
from commtrace.trace import schema
from tracebuilder import Proc, write_run

US = 1000


def _run(tmp_path, name="run"):
    procs = []
    for r in (0, 1):
        p = Proc(r)
        p.meta.append({"type": schema.META_GROUP, "id": 1, "world": 0, "world_id": "w0", "name": "1",
                       "desc": "mesh_tp", "backend": "gloo", "size": 2, "rank": r, "ranks": [0, 1]})
        p.meta.append({"type": schema.META_MESH, "dims": [{"dim": 0, "name": "dp", "group": "0"}]})
        p.span("forward", 0, 45, 1).span("backward", 45, 75, 1).span("optimizer", 75, 95, 1)
        p.op("all_gather", 10, 20, is_async=False, nbytes=64, module="layers.0", phase="forward")
        p.op("all_reduce", 30, 40, is_async=False, nbytes=16, group=1, module="layers.0.up", phase="forward")
        p.op("all_reduce", 50, 70, is_async=False, nbytes=16, group=1, module="layers.0.up", phase="backward")
        p.op("all_reduce", 80, 90, is_async=False, nbytes=8, phase="optimizer")
        procs.append(p)
    return write_run(tmp_path / name, procs, end_us=100)


def _by(run, by, capsys, extra=()):
    assert main(["report", run, "--by", by, "--json", "-", *extra]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["by"]["keys"] == by.split(",")
    return data["by"]["rows"]


def _figures(rows, keys):
    return {tuple(r[k] for k in keys): (r["collectives"], r["ops"], r["bytes"], r["mean_ns"]) for r in rows}


@pytest.mark.parametrize("extra", [[], ["--partitioned"]], ids=["one-frame", "partitioned"])
def test_report_by_mesh_dim_and_module_hand_computed(tmp_path, capsys, extra):
    run = _run(tmp_path)
    rows = _by(run, "mesh_dim", capsys, extra)
    assert _figures(rows, ["mesh_dim"]) == {("dp",): (2, 4, 144, 10 * US), ("tp",): (2, 4, 64, 15 * US)}
    rows = _by(run, "module,mesh_dim", capsys, extra)
    assert _figures(rows, ["module", "mesh_dim"]) == {
        ("layers.0", "dp"): (1, 2, 128, 10 * US), ("layers.0.up", "tp"): (2, 4, 64, 15 * US),
        ("-", "dp"): (1, 2, 16, 10 * US)}
    rows = _by(run, "module,phase", capsys, extra)   # the optimizer's op: module "-" (docs/report.md)
    assert _figures(rows, ["module", "phase"]) == {
        ("layers.0", "forward"): (1, 2, 128, 10 * US), ("layers.0.up", "forward"): (1, 2, 32, 10 * US),
        ("layers.0.up", "backward"): (1, 2, 32, 20 * US), ("-", "optimizer"): (1, 2, 16, 10 * US)}
    assert main(["report", run, "--by", "module,mesh_dim", "--width", "140", *extra]) == 0
    text = capsys.readouterr().out
    assert "By module, mesh_dim" in text and "layers.0.up" in text


def test_report_by_one_frame_and_partitioned_agree(tmp_path, capsys):
    run = _run(tmp_path)
    for by in ("module,phase", "phase,op,detail", "group,mesh_dim,op"):
        one, part = (_by(run, by, capsys, extra) for extra in ([], ["--partitioned"]))
        assert one == part and len(one)
    # the window applies: the backward alone
    one, part = (_by(run, "module", capsys, ["--phase", "backward", *extra]) for extra in ([], ["--partitioned"]))
    assert one == part and _figures(one, ["module"]) == {("layers.0.up",): (1, 2, 32, 20 * US)}


def test_report_by_unknown_column_is_one_line_error(tmp_path, capsys):
    run = _run(tmp_path)
    for extra in ([], ["--partitioned"]):
        assert main(["report", run, "--by", "nope", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--by nope" in err[0]


def test_compare_by_module_and_mesh_dim_on_both_paths(tmp_path, capsys):
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b")
    for by in ("module", "mesh_dim"):
        rows = []
        for extra in ([], ["--partitioned"]):
            assert main(["compare", a, b, "--by", by, "--json", "-", *extra]) == 0
            rows.append(json.loads(capsys.readouterr().out)["rows"])
        assert rows[0] == rows[1] and len(rows[0]) == (3 if by == "module" else 2)
