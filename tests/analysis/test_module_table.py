"""The per-module table (analysis.modules; docs/report.md "Per module"), hand-computed,
on one frame and partitioned.

Two ranks, one step (forward 0..100, backward 100..200, optimizer 200..210 µs):

=======  =================================================================================
rank 0   all_gather layers.0 forward 10..30 and 20..40 (blocking, 64 B each);
         reduce_scatter layers.0 backward 150..260 (async, returns at once, 32 B)
rank 1   all_gather layers.0 forward 10..50 (blocking, 64 B); all_reduce outside every
         module and phase 300..310 (blocking, 8 B)
=======  =================================================================================

(layers.0, forward): rank 0 comm = [10,40] = 30, all waited (blocking) so exposed 30;
rank 1 comm = exposed = 40; table: ranks 2, ops 3, bytes 192, comm = exposed = mean 35 µs.
(layers.0, backward): rank 0 only: comm 110; compute covers 150..210 (backward and
optimizer spans, nothing waited): exposed = 110 - 60 = 50; share 50/110.
(-, -): rank 1: comm = exposed = 10 (no span there).
"""
import json

import pytest

from commtrace.analysis.partitioned import analyse
from commtrace.cli import main
from tracebuilder import Proc, write_run

US = 1000


def _run(tmp_path):
    r0, r1 = Proc(0), Proc(1)
    for p in (r0, r1):
        p.span("forward", 0, 100, 1).span("backward", 100, 200, 1).span("optimizer", 200, 210, 1)
    r0.op("all_gather", 10, 30, is_async=False, nbytes=64, module="layers.0", phase="forward")
    r0.op("all_gather", 20, 40, is_async=False, nbytes=64, module="layers.0", phase="forward")
    r0.op("reduce_scatter", 150, 260, nbytes=32, module="layers.0", phase="backward")
    r1.op("all_gather", 10, 50, is_async=False, nbytes=64, module="layers.0", phase="forward")
    r1.op("all_reduce", 300, 310, is_async=False, nbytes=8)
    return write_run(tmp_path / "run", [r0, r1], end_us=400)


def test_module_table_hand_computed(tmp_path):
    t = analyse(_run(tmp_path), op_view=True).by_module
    fwd = t.loc[("layers.0", "forward")]
    assert (fwd["ranks"], fwd["ops"], fwd["bytes"]) == (2, 3, 192)
    assert fwd["comm_ns"] == 35 * US and fwd["exposed_ns"] == 35 * US and fwd["exposed_share"] == 1.0
    bwd = t.loc[("layers.0", "backward")]
    assert (bwd["ranks"], bwd["ops"], bwd["bytes"]) == (1, 1, 32)
    assert bwd["comm_ns"] == 110 * US and bwd["exposed_ns"] == 50 * US
    assert bwd["exposed_share"] == pytest.approx(50 / 110)
    none = t.loc[("-", "-")]
    assert (none["ranks"], none["ops"], none["comm_ns"], none["exposed_ns"]) == (1, 1, 10 * US, 10 * US)
    assert list(t.index) == [("layers.0", "backward"), ("layers.0", "forward"), ("-", "-")]  # by comm_ns


def test_module_table_one_frame_and_partitioned_agree(tmp_path, capsys):
    run = _run(tmp_path)
    tables = []
    for extra in ([], ["--partitioned"]):
        assert main(["report", run, "--json", "-", *extra]) == 0
        tables.append(json.loads(capsys.readouterr().out)["by_module"])
    assert tables[0] == tables[1] and len(tables[0]) == 3
    # a window: the backward alone
    for extra in ([], ["--partitioned"]):
        assert main(["report", run, "--json", "-", "--phase", "backward", *extra]) == 0
        rows = json.loads(capsys.readouterr().out)["by_module"]
        assert [(r["module"], r["phase"], r["ops"]) for r in rows] == [("layers.0", "backward", 1)]


def test_no_module_no_table(tmp_path, capsys):
    r0, r1 = Proc(0), Proc(1)
    for p in (r0, r1):
        p.op("all_reduce", 10, 20, is_async=False)
    run = write_run(tmp_path / "run", [r0, r1])
    assert analyse(run, op_view=True).by_module is None
    assert main(["report", run, "--width", "120"]) == 0
    assert "Per module" not in capsys.readouterr().out
    for extra in ([], ["--partitioned"]):
        assert main(["report", run, "--json", "-", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["by_module"] == []


def test_mesh_dim_from_mesh_lines_and_group_desc(tmp_path):
    """A group is named by the process's ``mesh`` line (a 1-D mesh over the world reuses
    the default group), else by torch's ``mesh_<dim>`` description; compare --by mesh_dim."""
    import commtrace
    from commtrace.trace import schema
    runs = []
    for name, desc, mesh in (("a", "default_pg", [{"dim": 0, "name": "tp", "group": "0"}]),
                             ("b", "mesh_dp", None)):
        procs = [Proc(r, group_desc=desc) for r in (0, 1)]
        for p in procs:
            if mesh:
                p.meta.append({"type": schema.META_MESH, "dims": mesh})
            p.op("all_reduce", 10, 20, is_async=False)
        runs.append(write_run(tmp_path / name, procs))
    assert set(commtrace.load(runs[0])["mesh_dim"]) == {"tp"}
    assert set(commtrace.load(runs[1])["mesh_dim"]) == {"dp"}
    assert main(["compare", runs[0], runs[1], "--by", "mesh_dim", "--json", "-"]) == 0


def test_module_view_in_compare_and_html(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["compare", run, run, "--by", "module,phase", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["by"] == ["module", "phase"]
    page = tmp_path / "r.html"
    assert main(["report", run, "--html", str(page), "-q"]) == 0
    html = page.read_text()
    assert "Per module" in html and "layers.0" in html
