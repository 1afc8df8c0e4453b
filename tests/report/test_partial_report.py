"""The report analysed in partitions (--partitioned, a memory limit the run does not fit) prints
what the report of the run held whole prints: the banner, tables, timeline, events, exports."""
import os

import pytest

from commtrace.analysis.partitioned import analyse
from commtrace.analysis.run_info import load_report_run
from commtrace.cli import main
from synthetic import write_synthetic_run


def _report(run, *extra) -> str:
    import io
    import contextlib
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["report", str(run), "--width", "160", *extra])
    return out.getvalue()


def _banner(text: str) -> list[str]:
    """The banner lines (up to the first blank line), less the partitioned report's own "analysis" row."""
    lines = text.split("\n\n", 1)[0].splitlines()
    return [ln for ln in lines if not ln.startswith("  analysis ")]


@pytest.fixture(scope="module")
def odd_runs(tmp_path_factory):
    """A rank missing and two hosts; a file cut mid-record (failed and in-flight ops come with both)."""
    base = tmp_path_factory.mktemp("odd")
    missing = write_synthetic_run(str(base / "missing"), ranks=5, ops_per_rank=400, seed=7, p2p=True,
                                  missing_ranks=(2,), hosts=2)
    torn = write_synthetic_run(str(base / "torn"), ranks=3, ops_per_rank=400, seed=8, p2p=True)
    f = os.path.join(torn, next(x for x in os.listdir(torn) if x.startswith("rank1.") and x.endswith(".ops.bin")))
    os.truncate(f, os.path.getsize(f) - 32 * 50 - 7)
    return {"missing": missing, "torn": torn}


def test_banner_equals_one_frame(syn_run, real_run, accum_run, odd_runs):
    for run in (syn_run, real_run, accum_run, *odd_runs.values()):
        one_frame, partitioned = _report(run), _report(run, "--partitioned")
        assert "  analysis   partitioned (" in partitioned
        assert _banner(partitioned) == _banner(one_frame), run
        assert any(ln.startswith("  comm share ") for ln in _banner(one_frame))


def test_banner_numbers_equal_run_info(syn_run, real_run, odd_runs):
    for run in (syn_run, real_run, odd_runs["torn"]):
        info = analyse(run, op_view=True).info
        s = analyse(run, workers=1, memory_limit=1 << 20)
        for k in ("wall_ns", "span_ns", "t0_ns", "ops", "bytes", "failed", "in_flight", "ranks", "world_size",
                  "hosts", "backends", "command", "clocks", "incomplete_ranks", "endings", "comm_share_per_rank",
                  "comm_share", "run_id"):
            assert s.info[k] == info[k], (run, k)


def test_odd_runs_tables_equal_one_frame(odd_runs):
    """A rank missing from every collective (its file absent), failed ops, ops in flight at a cut
    trace's end: the collectives without their slowest rank's time are left out of bandwidth the
    same way by both engines."""
    from .test_partial import assert_same
    for run in odd_runs.values():
        rep = analyse(run, op_view=True)
        assert_same(rep, analyse(run, workers=1, memory_limit=1 << 20))
    by_op = analyse(odd_runs["missing"], op_view=True).by_op
    coll = ~by_op.index.isin(["send", "recv"])      # the ring's pairs without rank 2 are whole
    assert by_op["collectives"][coll].sum() > 0 and by_op["busbw"][coll].isna().all()
    assert by_op["busbw"][~coll].notna().all()


BOUNDED_TRAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bounded", "train.py")


@pytest.fixture(scope="module")
def bounded_runs(tmp_path_factory, bounded_ring):
    """Real mp.spawn DDP runs (tests/bounded/train.py, 30 steps, 2 ranks): a ring of the last
    40 ops per process (it went round: two segments per file; tests/conftest.py's, which
    tests/bounded/test_bounded.py checks too) and a steps window 10:12."""
    import helpers as h
    def window():
        d = str(tmp_path_factory.mktemp("window") / "run")
        h.run([h.PY, "-m", "commtrace", "run", "-o", d, "--steps", "10:12", BOUNDED_TRAIN, "30", "spawn", "2",
               h.free_port()], env=dict(os.environ), timeout=120).check(0)
        return d
    ring, window = h.concurrently(lambda: bounded_ring("native"), window)
    return {"ring": ring, "window": window}


def test_bounded_runs_partitioned_equal_one_frame(bounded_runs):
    import glob
    from .test_partial import assert_same
    assert glob.glob(os.path.join(bounded_runs["ring"], "*.ops.bin.1"))      # the ring went round
    for name, run in bounded_runs.items():
        rep = analyse(run, op_view=True)
        s = analyse(run, workers=1, memory_limit=1 << 20)     # a tiny limit: many partitions
        assert_same(rep, s)
        assert s.info["coverage"] == rep.info["coverage"] and s.info["coverage"]
        assert s.info["comm_share_per_rank"] == rep.info["comm_share_per_rank"]
        one_frame, partitioned = _report(run, "--events"), _report(run, "--partitioned", "--events")
        assert _shown(partitioned) == _shown(one_frame)     # timeline and every event (ranks read whole) included
        assert any(ln.startswith("  coverage ") for ln in _banner(partitioned)), name


def _scenarios():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "analysis", "scenarios.py")
    spec = importlib.util.spec_from_file_location("partial_report_scenarios", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regions_table_hand_computed(tmp_path):
    # tests/analysis/scenarios.regions: eval on ranks 0 (entered twice) and 1; eval/inner on rank 0.
    d = _scenarios().regions(tmp_path / "r")
    r = analyse(d, workers=1, memory_limit=1 << 20).regions
    us = 1000
    ev = r.loc["eval"]
    assert (ev["ranks"], ev["entries"], ev["time_ns"], ev["comm_ns"], ev["ops"]) == (2, 3, 20 * us, 7 * us, 3)
    assert ev["comm_share"] == pytest.approx(0.35)
    inner = r.loc["eval/inner"]
    assert (inner["ranks"], inner["time_ns"], inner["comm_ns"], inner["ops"]) == (1, 4 * us, 2 * us, 1)
    import pandas as pd
    pd.testing.assert_frame_equal(r, analyse(d, op_view=True).regions)
    one_frame, partitioned = _report(d), _report(d, "--partitioned")
    section = lambda t: t[t.index("Regions (commtrace.region)"):].split("\n\n")[0]  # noqa: E731
    assert section(partitioned) == section(one_frame)


def _shown(text: str) -> list[str]:
    """The report's lines (timeline included), less the partitioned report's own "analysis" row."""
    return [ln for ln in text.splitlines() if not ln.startswith("  analysis ")]


WINDOWS = (["--steps", "3:10"], ["--skip-steps", "2"], ["--phase", "backward"], ["--from", "0.5s", "--to", "1.5s"],
           ["--steps", "5:20", "--phase", "backward,pipeline", "--from", "300ms"])


def test_windows_equal_one_frame(syn_run, tmp_path):
    """Every window option: the same tables and numbers as the one-frame windowed report
    (a synthetic run with steps and phases; the regions scenario in a time window)."""
    from commtrace.analysis.window import Window
    from .test_partial import assert_same
    regions = _scenarios().regions(tmp_path / "r")
    for run, args in [(syn_run, a) for a in WINDOWS] + [(regions, ["--from", "1us", "--to", "25us"])]:
        kw = {"--steps": "steps", "--skip-steps": "skip_steps", "--phase": "phase", "--from": "t_from", "--to": "t_to"}
        w = Window.from_args(**{kw[a]: int(v) if a == "--skip-steps" else v for a, v in zip(args[::2], args[1::2])})
        rep = analyse(run, window=w, op_view=True)
        s = analyse(run, workers=1, memory_limit=1 << 20, window=w)
        if len(rep.op_view.frame):
            assert_same(rep, s)
        else:       # an empty window (empty tables: the one frame's have object dtypes)
            assert s.ops == 0 and s.steps.shown == rep.steps.shown == 0 and not len(s.by_op)
        for k in ("wall_ns", "span_ns", "window_ns", "comm_share_per_rank", "ops", "bytes", "window", "t0_ns"):
            assert s.info[k] == rep.info[k], (args, k)
        import pandas as pd
        pd.testing.assert_frame_equal(s.regions, rep.regions)
        assert _shown(_report(run, "--partitioned", *args)) == _shown(_report(run, *args)), args


def test_window_errors_and_compare(syn_run, tmp_path, capsys):
    assert main(["report", str(syn_run), "--partitioned", "--phase", "backwards"]) == 2
    assert "--phase backwards: no op of this run has that phase" in capsys.readouterr().err
    for engine in ([], ["--partitioned"]):     # steps beyond the run: what it has, not an empty report
        assert main(["report", str(syn_run), "--steps", "400:500", *engine]) == 2
        assert "--steps 400:500: the run has steps " in capsys.readouterr().err
    exp = write_synthetic_run(str(tmp_path / "exp"), ranks=4, ops_per_rank=300, seed=2, p2p=True)
    assert main(["compare", str(syn_run), exp, "--width", "160", "--skip-steps", "2"]) == 0
    one_frame = capsys.readouterr().out
    assert main(["compare", str(syn_run), exp, "--width", "160", "--skip-steps", "2", "--partitioned"]) == 0
    assert capsys.readouterr().out == one_frame


def _same_values(one_frame, partitioned) -> None:
    """``partitioned`` (rank by rank) holds the rows of ``one_frame`` (interleaved by time), value for value."""
    import pandas as pd
    a = one_frame.sort_values(["rank", "t_start_ns"], kind="stable").reset_index(drop=True)
    assert list(a.columns) == list(partitioned.columns) and len(a) == len(partitioned)
    for c in a.columns:
        x, y = a[c], partitioned[c]
        if isinstance(x.dtype, pd.CategoricalDtype) or x.dtype == object:   # Parquet: strings, not categories
            assert x.astype(object).where(x.notna(), None).tolist() == \
                y.astype(object).where(y.notna(), None).tolist(), c
        else:
            pd.testing.assert_series_equal(x, y, check_names=False)


def test_csv_and_parquet_rank_by_rank(syn_run, real_run, tmp_path):
    import pandas as pd
    for run in (syn_run, real_run):
        for window in ([], ["--skip-steps", "1", "--phase", "backward"]):
            one, part = tmp_path / "one", tmp_path / "part"
            assert main(["report", str(run), "-q", "--csv", f"{one}.csv", "--parquet", f"{one}.parquet", *window]) == 0
            assert main(["report", str(run), "-q", "--partitioned", "--csv", f"{part}.csv",
                         "--parquet", f"{part}.parquet", *window]) == 0
            csv = pd.read_csv(f"{part}.csv")
            assert len(csv) and (csv["rank"].diff().dropna() >= 0).all()       # rank 0's rows, then rank 1's
            pd.testing.assert_frame_equal(
                pd.read_csv(f"{one}.csv").sort_values(["rank", "t_start_ns"], kind="stable").reset_index(drop=True),
                csv)
            _same_values(pd.read_parquet(f"{one}.parquet"), pd.read_parquet(f"{part}.parquet"))


def test_events_with_limit(syn_run, capsys):
    """The first N ops in time order over every rank (in the window): the one-frame event list."""
    for args in (["--limit", "25"], ["--limit", "40", "--skip-steps", "3", "--phase", "backward"],
                 ["--limit", "30", "--from", "1s", "--to", "1.1s"], ["--limit", "5000"]):
        one_frame = _report(syn_run, "--events", *args)
        partitioned = _report(syn_run, "--partitioned", "--events", *args)
        events = partitioned[partitioned.index("\nEvents ("):]
        assert events == one_frame[one_frame.index("\nEvents ("):], args
        assert events.count("\n") > 5


def test_damaged_run_exit_code(odd_runs, capsys):
    """Unreadable trace data: exit 1 and the same one line as the one-frame report."""
    assert main(["report", odd_runs["torn"], "-q"]) == 1
    one_frame = capsys.readouterr().err.splitlines()[-1]
    assert main(["report", odd_runs["torn"], "-q", "--partitioned"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == one_frame
    assert one_frame.startswith("commtrace: unreadable trace data left out of the figures: ")
    assert main(["report", odd_runs["missing"], "-q", "--partitioned"]) == 0


@pytest.fixture(scope="module")
def cpp_layer_run(tmp_path_factory):
    """Ranks 0 and 1 of the ProcessGroupMPI patch's trace writer (tests/cpp/main.cpp, "basic":
    world-group ops, subgroup ops only the C++ layer sees, an MPI error) and, per process, a
    Python-layer file holding the world-group ops (as tests/test_patch.py builds one)."""
    import glob
    import json
    import shutil
    import subprocess
    import numpy as np
    from commtrace.trace import schema
    from commtrace.trace.writer import TraceWriter
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    base = tmp_path_factory.mktemp("cpp")
    drv = str(base / "driver")
    subprocess.run([gxx, "-std=c++17", "-O1", "-pthread", f"-I{os.path.join(root, 'patches')}",
                    os.path.join(root, "tests", "cpp", "main.cpp"), "-o", drv], check=True, capture_output=True)
    run = base / "run"
    run.mkdir()
    for rank in (0, 1):
        subprocess.run([drv, "basic", str(rank)], env={**os.environ, schema.ENV_DIR: str(run)}, check=True,
                       capture_output=True, timeout=60)
    for meta_path in sorted(glob.glob(str(run / "*.cpp.meta.jsonl"))):
        meta = [json.loads(line) for line in open(meta_path) if line.strip()]
        recs = np.fromfile(meta_path[: -len(schema.META_SUFFIX)] + schema.OPS_SUFFIX, dtype=schema.OP_RECORD)
        head = meta[0]
        sig_op = {m["id"]: m["op"] for m in meta if m["type"] == "sig"}
        py_sigs, rows = {}, []
        for r in np.sort(recs[recs["group"] == 0], order="seq"):
            sid = py_sigs.setdefault(sig_op[int(r["sig"])], len(py_sigs))
            rows.append((int(r["t_call"]) - 2000, 1500.0, float(r["d_end"]) + 5000, int(r["seq"]), sid, 0, 0,
                         int(r["status"]), schema.FLAG_SOURCE_PYTHON))
        w = TraceWriter(str(run), f"rank{head['rank']}.pid{head['pid']}")
        lines = [{"type": "header", "format": schema.FORMAT_NAME, "version": schema.FORMAT_VERSION,
                  "source": "python", "pid": head["pid"], "rank": head["rank"], "host": head["host"],
                  "t_wall_ns": head["t_wall_ns"], "t_mono_ns": head["t_mono_ns"]},
                 {"type": "world", "world": 0, "world_id": "w0", "rank": head["rank"], "world_size": 4,
                  "backend": "mpi"},
                 {"type": "group", "id": 0, "world": 0, "world_id": "w0", "name": "0", "backend": "mpi",
                  "size": 4, "rank": head["rank"], "ranks": [0, 1, 2, 3]}]
        lines += [{"type": "sig", "id": sid, "op": op, "variant": op} for op, sid in py_sigs.items()]
        lines.append({"type": "end", "exit_code": 0, "how": "exit", "t_wall_ns": 0, "t_mono_ns": 0})
        w.write(lines, np.array(rows, dtype=schema.OP_RECORD))
        w.close()
    return str(run)


def test_cpp_layer_run_equals_one_frame(cpp_layer_run):
    from .test_partial import assert_same
    run = load_report_run(cpp_layer_run)
    assert (run.frame["source"] == "cpp").any() and (run.frame["source"] == "python").any()   # merged, not all
    rep = analyse(cpp_layer_run, op_view=True)
    s = analyse(cpp_layer_run, workers=1, memory_limit=1 << 20)
    assert_same(rep, s)
    for k in ("ops", "bytes", "failed", "in_flight", "wall_ns", "comm_share_per_rank", "ranks", "backends"):
        assert s.info[k] == rep.info[k], k
    assert _shown(_report(cpp_layer_run, "--partitioned")) == _shown(_report(cpp_layer_run))
    from commtrace.analysis.window import Window
    w = Window.from_args(t_from="1ms", phase="-")      # the run's first op found with the C++ files' clocks
    rep = analyse(cpp_layer_run, window=w, op_view=True)
    s = analyse(cpp_layer_run, workers=1, memory_limit=1 << 20, window=w)
    assert len(rep.op_view.frame) and s.info["t0_ns"] == rep.info["t0_ns"]
    assert_same(rep, s)


def test_cpp_layer_run_exports_and_events(cpp_layer_run, tmp_path):
    """--csv and --events of a C++-layer run: C++ rows merged into Python rows, as the one frame has them."""
    import pandas as pd
    one, part = tmp_path / "one.csv", tmp_path / "part.csv"
    assert main(["report", cpp_layer_run, "-q", "--csv", str(one)]) == 0
    assert main(["report", cpp_layer_run, "-q", "--partitioned", "--csv", str(part)]) == 0
    pd.testing.assert_frame_equal(
        pd.read_csv(one).sort_values(["rank", "t_start_ns"], kind="stable").reset_index(drop=True), pd.read_csv(part))
    for limit in (["--limit", "100"], []):       # without: the ranks with C++ files are read whole
        one_frame = _report(cpp_layer_run, "--events", *limit)
        partitioned = _report(cpp_layer_run, "--partitioned", "--memory-limit", "1M", "--events", *limit)
        assert partitioned[partitioned.index("\nEvents ("):] == one_frame[one_frame.index("\nEvents ("):]


def test_cpp_layer_run_check(cpp_layer_run, capsys):
    """check of a C++-layer run: C++ rows merged into Python rows as the loaded run has them (one
    chunk); cut into seq chunks it cannot be merged alike: exit 2, one line."""
    from commtrace.analysis.check import diagnose
    from commtrace.analysis.partitioned.check_map import check_run
    from commtrace.trace.reader import load_run
    one = [f.to_dict() for f in diagnose(load_run(cpp_layer_run))]
    s = check_run(cpp_layer_run, progress=False)
    assert s.chunks == 1 and [f.to_dict() for f in s.findings] == one
    assert any(f["kind"] == "failed" for f in one)           # the driver's MPI error, on its merged row
    assert main(["check", cpp_layer_run, "--partitioned"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "C++-layer trace files" in err


def test_window_on_dask_equals_one_frame(syn_run):
    """The window travels to the workers of a real Dask LocalCluster (worker processes)."""
    distributed = pytest.importorskip("distributed")
    from commtrace.analysis.window import Window
    from .test_partial import assert_same
    w = Window.from_args(skip_steps=2, phase="backward,pipeline", t_from="300ms")
    rep = analyse(syn_run, window=w, op_view=True)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
                                  ) as cluster, distributed.Client(cluster) as client:
        s = analyse(syn_run, dask=client, window=w)
    assert s.executor == "dask"
    assert_same(rep, s)
    assert s.info["comm_share_per_rank"] == rep.info["comm_share_per_rank"] and s.info["window"] == rep.info["window"]


def test_html_tables_and_figures(syn_run, tmp_path):
    """--html: the one-frame page's tables, step and straggler figures; no figure drawn from every op."""
    import json
    import re

    def page(*extra):
        out = tmp_path / f"{len(extra)}.html"
        assert main(["report", str(syn_run), "-q", "--html", str(out), *extra]) == 0
        html = out.read_text()
        data = json.loads(re.search(r'<script id="commtrace-data" type="application/json">(.*?)</script>', html,
                                    re.S).group(1))
        tables = []                      # the steady view's tables, then the whole run's
        for part in html.split("<h2>Tables</h2>")[1:]:
            tables.append(part[:part.index("<h2>")])
        return html, {f["id"]: f["figure"] for f in data["figures"]}, tables

    one_html, one_figs, one_tables = page()
    html, figures, tables = page("--partitioned")
    assert tables == one_tables and len(tables) == 2 and all("<table" in t for t in tables)
    assert "Steady state" in html and 'id="show-setup"' in html        # steady by default here too
    assert set(figures) == {"steps-chart-steady", "stragglers-steady", "steps-chart-all", "stragglers-all"}
    assert set(one_figs) >= set(figures)
    for fid, fig in figures.items():
        assert fig == one_figs[fid], fid
    assert "Analysed file by file (partitioned)" in html and '<div id="timeline"' not in html
    assert '<div id="timeline"' in one_html


def _tracebuilder():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tracebuilder.py")
    spec = importlib.util.spec_from_file_location("partial_report_tracebuilder", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_split_phases_note(tmp_path):
    """Three ranks; all_reduce seq 1 in backward everywhere; seq 2 in backward on ranks 0, 2 and in
    join on rank 1; a barrier (seq 3) with no phase on rank 2 only vs optimizer on 0, 1:
    two split collectives, seq 2 first ("backward: 0,2; join: 1"), then seq 3 ("-: 2; optimizer: 0,1")."""
    tb = _tracebuilder()
    procs = [tb.Proc(r, world_size=3) for r in range(3)]
    for r, p in enumerate(procs):
        p.op("all_reduce", 10 + r, 20, phase="backward")
        p.op("all_reduce", 30 + r, 40, phase="join" if r == 1 else "backward")
        p.op("barrier", 50 + r, 60, phase=None if r == 2 else "optimizer")
    d = tb.write_run(tmp_path / "split", procs)
    s = analyse(d, workers=1, memory_limit=1 << 20)
    assert s.split.to_dict("records") == [
        {"op": "all_reduce", "group": "0", "seq": 2, "by_rank": "backward: 0,2; join: 1"},
        {"op": "barrier", "group": "0", "seq": 3, "by_rank": "-: 2; optimizer: 0,1"}]
    import pandas as pd
    pd.testing.assert_frame_equal(s.split, analyse(d, op_view=True).split, check_dtype=False)
    one_frame, partitioned = _report(d), _report(d, "--partitioned")
    assert "2 collective(s) ran in different phases on different ranks" in partitioned
    assert _shown(partitioned) == _shown(one_frame)


def test_perfetto_pieces_in_a_window(syn_run, tmp_path, capsys):
    """--perfetto in a window: the ops, compute spans and flows of the one-frame windowed export
    (one piece holding every rank), and the same slices (ops and compute spans, each in one
    piece) when cut into pieces."""
    import glob
    import json

    def events(files):
        out: dict = {}
        for f in files:
            for e in json.load(open(f))["traceEvents"]:
                k = (e.get("ph"), e.get("cat"))
                out[k] = out.get(k, 0) + 1
        return {k: v for k, v in out.items() if k[0] in ("X", "s", "f")}

    for window in (["--skip-steps", "3", "--phase", "backward"], ["--from", "0.5s", "--to", "1.5s"]):
        one = tmp_path / "one.json"
        assert main(["report", str(syn_run), "-q", "--perfetto", str(one), *window]) == 0
        expected = events([one])
        assert expected[("X", "collective")] > 0
        for max_mb, name in (("1000", "whole"), ("0.2", "cut")):
            out = tmp_path / f"{name}.json"
            assert main(["report", str(syn_run), "-q", "--partitioned", "--perfetto", str(out),
                         "--perfetto-max-mb", max_mb, *window]) == 0
            got = events(glob.glob(str(tmp_path / f"{name}.*.json")))
            if name == "whole":
                assert got == expected, window
            else:
                slices = {k: v for k, v in expected.items() if k[0] == "X"}
                assert ("X", "compute") in slices and {k: got.get(k) for k in slices} == slices, window
    capsys.readouterr()


def test_perfetto_pieces_hold_each_span_once(tmp_path, capsys):
    """Rank 0: 10 ops, at 0, 10, ..., 90 us; with --perfetto-max-mb 0.004 (4 ops a file) in
    3 time windows: ops 0-2, 3-5, 6-9, owning [.., 30 us), [30, 60), [60, ..). Its spans
    start at -5 (before every op), 1, 25 (until 45: crosses 30), 58 (until 62: crosses 60)
    and 95 (after every op); a mark at 30, a region 55-75. Hand-counted: part 1 has 3 ops
    and the spans from -5, 1, 25; part 2 3 ops, the span from 58, the mark, the region;
    part 3 4 ops, the span from 95. Rank 1 (3 ops) is one file. Every op, span, mark and
    region of the one-file export is in exactly one piece."""
    import glob
    import json
    tb = _tracebuilder()
    p0, p1 = tb.Proc(0), tb.Proc(1)
    for i in range(10):
        p0.op("all_reduce", 10 * i, 10 * i + 5)
    for i in range(3):
        p1.op("all_reduce", 10 * i + 1, 10 * i + 5)
    for k, (phase, b, e) in enumerate([("forward", -5, -1), ("forward", 1, 8), ("backward", 25, 45),
                                       ("optimizer", 58, 62), ("forward", 95, 99)]):
        p0.span(phase, b, e, step=k + 1)
    p0.mark("epoch 1", 30).region("eval", 55, 75)
    d = tb.write_run(tmp_path / "run", [p0, p1])

    def events(f):
        return [(e["ph"], e.get("cat"), e["name"], e["ts"]) for e in json.load(open(f))["traceEvents"]
                if e["ph"] in ("X", "i")]

    assert main(["report", d, "-q", "--perfetto", str(tmp_path / "one.json")]) == 0
    assert main(["report", d, "-q", "--partitioned", "--perfetto", str(tmp_path / "cut.json"),
                 "--perfetto-max-mb", "0.004"]) == 0
    capsys.readouterr()
    pieces = {os.path.basename(f): events(f) for f in glob.glob(str(tmp_path / "cut.*.json"))}
    counts = {f: {c: sum(1 for e in ev if e[1] == c) for c in ("collective", "compute", "mark", "region")}
              for f, ev in pieces.items()}
    assert counts == {
        "cut.rank-0.part-1-of-3.json": {"collective": 3, "compute": 3, "mark": 0, "region": 0},
        "cut.rank-0.part-2-of-3.json": {"collective": 3, "compute": 1, "mark": 1, "region": 1},
        "cut.rank-0.part-3-of-3.json": {"collective": 4, "compute": 1, "mark": 0, "region": 0},
        "cut.rank-1.json": {"collective": 3, "compute": 0, "mark": 0, "region": 0}}
    assert sorted(e for ev in pieces.values() for e in ev) == sorted(events(tmp_path / "one.json"))


def test_compare_html_partitioned(syn_run, tmp_path):
    """compare --html of partitioned runs: the one-frame page (tables and the per-run step figure)."""
    exp = write_synthetic_run(str(tmp_path / "exp"), ranks=4, ops_per_rank=300, seed=2, p2p=True)
    pages = []
    for extra in ([], ["--partitioned"]):
        out = tmp_path / f"cmp{len(extra)}.html"
        assert main(["compare", str(syn_run), exp, "--skip-steps", "1", "--html", str(out), "--width", "120",
                     *extra]) == 0
        pages.append(out.read_text())
    assert "<table" in pages[1] and pages[1] == pages[0]


def test_by_any_cell_key_equals_one_frame(syn_run, real_run, odd_runs, cpp_layer_run):
    """--by the keys the cells carry beyond CELL_COLUMNS (a sig's, group's, process's or record's, and a
    DDP gradient all_reduce's bucket and params, numbered over its whole process): the table of the run held whole
    and in partitions is the one frame's (oracle.op_summary of every op). The cells carry every groupable key.
    Keys are asked for together (a cell per distinct combination: a wrong value of any key for any op shows),
    the record keys apart and with the others (the cells split records only when one is asked), not one by one:
    5 runs x 24 keys x 2 analyses took 100 s of the suite."""
    import pandas as pd
    from commtrace.analysis.compare import GROUPABLE
    from commtrace.analysis.partitioned.rank_ops import CELL_EXTRA_KEYS, CELL_KEYS, RECORD_KEYS
    from oracle import op_summary
    assert set(CELL_KEYS) == set(GROUPABLE)
    per_op = [k for k in CELL_EXTRA_KEYS if k not in RECORD_KEYS]
    for run in (syn_run, real_run, *odd_runs.values(), cpp_layer_run):     # torn: failed and in-flight ops
        v = analyse(run, op_view=True).op_view
        for keys in (per_op, list(RECORD_KEYS), list(CELL_EXTRA_KEYS)):
            by, key = ["op", *keys], ",".join(keys)
            one_frame = op_summary(v.frame, v.matched, by, v.arrays)
            assert len(one_frame), (run, key)
            for s in (analyse(run, compare_by=by), analyse(run, workers=1, memory_limit=1 << 20, compare_by=by)):
                pd.testing.assert_frame_equal(s.summary(by), one_frame, check_dtype=False, check_index_type=False,
                                              obj=f"{run} --by op,{key}")


def test_cli_by_cell_key_partitioned_prints_the_same(syn_run, real_run, odd_runs, tmp_path):
    """report --by op,host / dtype,rank / status,op / bucket,op / op,params: the same table and JSON whole and
    partitioned (a DDP run's buckets and their parameters too)."""
    import json
    for run, by in ((odd_runs["missing"], "op,host"), (syn_run, "dtype,rank"), (odd_runs["torn"], "status,op"),
                    (syn_run, "bucket,op"), (real_run, "op,params")):
        shown = [_report(run, "--by", by, *p) for p in ((), ("--partitioned",))]
        assert _shown(shown[1]) == _shown(shown[0]) and by.split(",")[1] in shown[0]
        docs = []
        for p in ((), ("--partitioned",)):
            out = tmp_path / "r.json"
            docs.append((main(["report", run, "--by", by, "--json", str(out), "-q", *p]),     # torn: exit code 1
                         json.loads(out.read_text())["by"]))
        (code, one_frame), (code_p, partitioned) = docs
        assert code == code_p and one_frame["keys"] == partitioned["keys"] and len(one_frame["rows"]) > 1
        for a, b in zip(one_frame["rows"], partitioned["rows"], strict=True):     # sums in another order: ~1e-15
            assert a == {k: pytest.approx(v, rel=1e-12, nan_ok=True) if isinstance(v, float) else v
                         for k, v in b.items()}


def test_by_root_of_recvs_from_any_source(tmp_path):
    """--by op,root: a recv from any source is filed under the rank its ``source`` line names (as the
    frame's root column has it), whole and in partitions; one without a line under none ("-")."""
    import pandas as pd
    from oracle import op_summary
    from commtrace.trace import schema
    tb = _tracebuilder()
    procs = [tb.Proc(r, world_size=3) for r in range(3)]
    for i in range(1, 31):
        src, t = (1 if i % 2 else 2), 10.0 * i
        procs[src].op("send", t - 2, t + 1, seq=(i + 1) // 2, root=0)
        procs[0].op("recv", t - 1, t + 1, seq=i, variant="recv_anysource")
        if i < 30:
            procs[0].meta.append({"type": schema.META_SOURCE, "t_call": tb.ns(t - 1), "group": 0, "seq": i,
                                  "sig": procs[0].records[-1][4], "src": src})
    run = tb.write_run(str(tmp_path / "r"), procs)
    v = analyse(run, op_view=True).op_view
    by = ["op", "root"]
    one_frame = op_summary(v.frame, v.matched, by, v.arrays)
    assert ("recv", "1") in one_frame.index and ("recv", "2") in one_frame.index and ("recv", "-") in one_frame.index
    # every figure, algbw / busbw too: a recv from any source pairs with the send of the rank it received from
    # (trace.p2p_order); the last one, whose sender is not known, with none, nor the send it received (once,
    # no recv from any source paired: untimed, no bandwidth; before that the frame's matching paired them by the
    # source line's rank and the seq, which counts recvs from any source)
    assert one_frame.loc[[("recv", "1"), ("recv", "2")], "algbw"].notna().all()
    assert one_frame.loc[("recv", "-"), "algbw"] != one_frame.loc[("recv", "-"), "algbw"]     # NaN
    assert one_frame.loc[("recv", "1"), "untimed"] == one_frame.loc[("recv", "2"), "untimed"] == 0
    assert one_frame.loc[("recv", "-"), "untimed"] == one_frame.loc[("send", "0"), "untimed"] == 1
    for s in (analyse(run, compare_by=by), analyse(run, workers=1, memory_limit=1 << 20, compare_by=by)):
        pd.testing.assert_frame_equal(s.summary(by), one_frame, check_dtype=False, check_index_type=False)


def test_by_bucket_rule_is_the_runs_meta_not_the_rows_read(tmp_path):
    """Whether a run's gradient all_reduces get bucket numbers (it has phases) is decided once, from its sig lines
    (annotations.bucket_rule), for the frame and the cells alike. Here rank 0's only phased sig has no op left (as
    in a bounded run, which keeps every sig line and only the last ops), and rank 1's join shadow of a gradient
    all_reduce has no phase: before, the frame decided from its rows (no phase: no buckets, bucket "-") and the
    cells from the sig lines (bucket "0"), so --by op,bucket differed from op_summary."""
    import pandas as pd
    from oracle import op_summary
    tb = _tracebuilder()
    p0, p1 = tb.Proc(0), tb.Proc(1)
    p0._sig({"op": "all_reduce", "phase": "backward", "module": "Net", "dtype": "float32"})    # no op of it kept
    for i in range(3):
        p0.op("all_reduce", 10 * i, 10 * i + 4, module="Net", detail="join_shadow_grad", iteration=i)
        p1.op("all_reduce", 10 * i + 1, 10 * i + 4, module="Net", detail="join_shadow_grad", iteration=i)
    run = tb.write_run(str(tmp_path / "r"), [p0, p1])
    v = analyse(run, op_view=True).op_view
    by = ["op", "bucket"]
    one_frame = op_summary(v.frame, v.matched, by, v.arrays)
    assert list(one_frame.index) == [("all_reduce", "0")]
    for s in (analyse(run, compare_by=by), analyse(run, workers=1, memory_limit=1 << 20, compare_by=by)):
        pd.testing.assert_frame_equal(s.summary(by), one_frame, check_dtype=False, check_index_type=False)


def test_another_runs_file_is_left_out_before_worlds_are_numbered(tmp_path):
    """A run directory that also holds a file of another run (one `-o DIR` used twice): that file is left out
    before anything is derived from the files, whole and in partitions alike. Before, both numbered the worlds
    with the other run's (created first: w0), so this one-world run was "2 in 2 worlds (w1:r0-1)", keyed by rank
    keys 2^20 + r; and the frame (op view) took the bucket rule from the other run's phased sig, the cells not."""
    import pandas as pd
    from oracle import op_summary
    tb = _tracebuilder()
    procs = [tb.Proc(r, world_id="wz") for r in range(2)]
    for p in procs:
        for i in range(4):
            p.op("all_reduce", 10 * i + p.rank, 10 * i + 5, module="Net", detail="join_shadow_grad", iteration=i)
    run = tb.write_run(str(tmp_path / "r"), procs)
    other = tb.Proc(0, world_size=1, pid=9000, world_id="wa")     # its world id sorts first: w0
    other.op("all_reduce", 0, 3, phase="backward", module="Net")
    other.write(run, 1_000.0, run_id="other")
    by = ["op", "rank", "bucket"]
    v = analyse(run, op_view=True).op_view
    assert sorted(set(v.frame["rank"])) == [0, 1]
    one_frame = op_summary(v.frame, v.matched, by, v.arrays)
    assert list(one_frame.index) == [("all_reduce", "0", "-"), ("all_reduce", "1", "-")]
    for s in (analyse(run, compare_by=by), analyse(run, workers=1, memory_limit=1 << 20, compare_by=by)):
        pd.testing.assert_frame_equal(s.summary(by), one_frame, check_dtype=False, check_index_type=False)
    for extra in ((), ("--partitioned",)):
        out = _report(run, *extra)
        assert "ranks      2 of 2" in out and "w1:" not in out, out
