"""The partitioned report's timeline (analysis.partitioned.timeline_map) and unbounded
``--events`` (analysis.partitioned.events_merge) print what the one-frame report prints:
real and synthetic runs, windows, serial / process pool / Dask LocalCluster, files
whose records are out of call order, duplicated (in flight at a flush) or corrupt."""
import os

import numpy as np
import pytest

from commtrace.analysis.partitioned import analyse
from commtrace.analysis.partitioned.events_merge import EventWindow, merged_events
from commtrace.analysis.partitioned.plan import plan_run
from commtrace.analysis.partitioned import analyse
from commtrace.analysis.timeline import bin_timeline, timeline_layout
from commtrace.analysis.window import Window
from commtrace.cli import main
from commtrace.render.events import window_range
from commtrace.trace import schema
from synthetic import write_synthetic_run

from .test_partial_report import WINDOWS, _report

WIDTH = 160


def _lines(text: str) -> list[str]:
    """A report's lines less the partitioned report's own "analysis" row."""
    return [ln for ln in text.splitlines() if not ln.startswith("  analysis ")]


def _window(args: list) -> Window:
    kw = {"--steps": "steps", "--skip-steps": "skip_steps", "--phase": "phase", "--from": "t_from", "--to": "t_to"}
    return Window.from_args(**{kw[a]: int(v) if a == "--skip-steps" else v for a, v in zip(args[::2], args[1::2])})


def _one_frame_timeline(run, window: Window):
    rep = analyse(run, window=window, op_view=True)
    lo, hi = window_range(rep)
    return bin_timeline(rep.op_view.frame, rep.info["t0_ns"] or 0, timeline_layout(WIDTH, rep.info["rank_list"])[1],
                        lo, hi, rep.op_view.arrays)


def _assert_same_timeline(a, b) -> None:
    assert (a.ranks, a.ops, a.t_from_ns, a.t_to_ns, a.t0_ns) == (b.ranks, b.ops, b.t_from_ns, b.t_to_ns, b.t0_ns)
    assert np.array_equal(a.cells, b.cells)
    assert np.array_equal(a.fill, b.fill)          # bit for bit: the same sums in the same order


@pytest.fixture(scope="module")
def disordered_run(tmp_path_factory):
    """A synthetic run whose rank 1 file is in completion order (as the writer writes records:
    async ops that finish late come after ops called later), with ops written twice (in flight
    at a flush, then finished), a corrupt record, and rank 3's file in reverse call order."""
    d = write_synthetic_run(str(tmp_path_factory.mktemp("disorder") / "run"), ranks=4, ops_per_rank=1500, seed=5,
                            p2p=True, slow_rank=2)
    files = sorted(f for f in os.listdir(d) if f.endswith(schema.OPS_SUFFIX))
    path = os.path.join(d, files[1])
    rec = np.fromfile(path, dtype=schema.OP_RECORD)
    done = rec["t_call"] + np.nan_to_num(rec["d_end"]).astype(np.int64) * 40     # long ops: much disorder
    rec = rec[np.argsort(done, kind="stable")]
    flushed = rec[::37].copy()                      # in flight at a flush: written before their final record
    flushed["status"] = schema.STATUS_IN_FLIGHT
    flushed["d_end"] = np.nan
    bad = rec[:1].copy()
    bad["status"] = 77                              # what no writer writes: not read
    out = np.concatenate((flushed[: len(flushed) // 2], rec[:700], bad, flushed[len(flushed) // 2:], rec[700:]))
    out.tofile(path)
    path3 = os.path.join(d, files[3])
    np.fromfile(path3, dtype=schema.OP_RECORD)[::-1].tofile(path3)
    return d


def _tracebuilder():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tracebuilder.py")
    spec = importlib.util.spec_from_file_location("views_tracebuilder", path)
    tb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tb)
    return tb


@pytest.fixture(scope="module")
def tied_run(tmp_path_factory):
    """Hand-made: ranks calling ops at the same instants (ties: rank order), zero-length ops, an op
    never completed (its duration unknown: the one-frame --events printed a traceback for it), rank 0
    without marks (the lane shows rank 1's)."""
    tb = _tracebuilder()
    procs = [tb.Proc(r, world_size=3) for r in range(3)]
    for r, p in enumerate(procs):
        ops = [(100, 300, "all_reduce"), (400, 400, "broadcast"), (410, 460, "all_reduce"), (500, None, "barrier")]
        for i, (start, end, op) in enumerate(ops):
            seq = {100: 1, 400: 2, 410: 3, 500: 4}[start]
            p.op(op, start + (7 if r == 2 and op == "barrier" else 0), end, seq=seq,
                 status=schema.STATUS_IN_FLIGHT if end is None else schema.STATUS_COMPLETED)
    procs[1].mark("warm", 50).mark("hot", 420)
    procs[2].mark("other", 30)
    return tb.write_run(tmp_path_factory.mktemp("tied") / "run", procs, end_us=900)


def test_timeline_equals_one_frame(syn_run, real_run, accum_run, tied_run):
    """The whole terminal report, timeline included, line for line (the one-frame report's
    tables were already equal: test_partial_report)."""
    for run in (syn_run, real_run, accum_run, tied_run):
        one_frame, partitioned = _report(run), _report(run, "--partitioned")
        assert "\nTimeline  " in partitioned and "rank 1 |" in partitioned
        assert _lines(partitioned) == _lines(one_frame), run
    assert "marks (rank 1): 1 hot (320.0 us)" in partitioned     # rank 0 made none; "warm" is before t0


def test_timeline_in_windows(syn_run):
    for args in WINDOWS:
        one_frame, partitioned = _report(syn_run, *args), _report(syn_run, "--partitioned", *args)
        assert _lines(partitioned) == _lines(one_frame), args


@pytest.mark.parametrize("workers", [1, 2])
def test_timeline_cells_bit_for_bit(syn_run, workers):
    for args in ([], ["--skip-steps", "2", "--phase", "backward,pipeline", "--from", "300ms"]):
        w = _window(args)
        s = analyse(syn_run, workers=workers, window=w, timeline_width=WIDTH)
        _assert_same_timeline(_one_frame_timeline(syn_run, w), s.timeline)
        assert s.timeline.cells.shape == (4, WIDTH - len("rank 3 ") - 2)     # ranks x columns: no op kept
    assert analyse(syn_run, workers=1).timeline is None                        # not asked for: not computed


def test_timeline_on_dask_equals_one_frame(syn_run):
    distributed = pytest.importorskip("distributed")
    w = _window(["--steps", "3:10"])
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
                                  ) as cluster, distributed.Client(cluster) as client:
        s = analyse(syn_run, dask=client, window=w, timeline_width=WIDTH)
        whole = analyse(syn_run, dask=client, timeline_width=WIDTH)
    assert s.executor == "dask"
    _assert_same_timeline(_one_frame_timeline(syn_run, w), s.timeline)
    _assert_same_timeline(_one_frame_timeline(syn_run, Window()), whole.timeline)


def _events(text: str) -> str:
    return text[text.index("\nEvents ("):]


def test_events_without_limit_equal_one_frame(syn_run, real_run, accum_run, tied_run):
    """Every event, streamed in small chunks (a tiny memory limit), as the one-frame --events
    (the real DDP runs' files hold async ops after ops called later)."""
    for run, args in [(syn_run, a) for a in [[], *WINDOWS]] + [(real_run, []), (accum_run, []), (tied_run, [])]:
        one_frame = _report(run, "--events", *args)
        partitioned = _report(run, "--partitioned", "--memory-limit", "1M", "--events", *args)
        assert _lines(partitioned) == _lines(one_frame), (run, args)
    assert len(_events(one_frame).strip().splitlines()) == 2 + 12     # title, header, 3 ranks x 4 ops
    assert main(["report", str(syn_run), "--partitioned", "--events", "--limit", "20"]) == 0   # --limit still works


def test_ranks_of_several_processes(tmp_path):
    """Two processes per rank (e.g. successive spawns) calling at the same instants: ties in
    time go by rank, then by the rank's files in name order, in the timeline and the events."""
    tb = _tracebuilder()
    procs = []
    for pid in (4000, 5000):
        for r in range(2):
            p = tb.Proc(r, world_size=2, pid=pid + r)
            for k in range(5):
                p.op("all_reduce" if k % 2 else "broadcast", 100 + 50 * k, 130 + 50 * k + (pid == 5000) * 5, seq=k + 1)
            procs.append(p)
    run = tb.write_run(tmp_path / "run", procs)
    one_frame = _report(run, "--events")
    assert _lines(_report(run, "--partitioned", "--memory-limit", "1M", "--events")) == _lines(one_frame)
    first = [ln.split() for ln in one_frame[one_frame.index("\nEvents ("):].splitlines()[3:7]]
    assert [(f[2], f[-3]) for f in first] == [("0", "30.0"), ("0", "35.0"), ("1", "30.0"), ("1", "35.0")]


def test_events_of_disordered_files(disordered_run):
    """Out of call order, written twice, corrupt: the same events in the same order (and a file
    really out of order, with records the reader drops)."""
    rec = np.fromfile(os.path.join(disordered_run, sorted(f for f in os.listdir(disordered_run)
                                                          if f.endswith(schema.OPS_SUFFIX))[1]), schema.OP_RECORD)
    assert not (np.diff(rec["t_call"]) >= 0).all() and (rec["status"] == schema.STATUS_IN_FLIGHT).any()
    for args in ([], ["--from", "200ms", "--to", "900ms"], ["--phase", "backward"]):
        one_frame = _report(disordered_run, "--events", *args)
        partitioned = _report(disordered_run, "--partitioned", "--memory-limit", "1M", "--events", *args)
        assert _events(partitioned) == _events(one_frame), args
        assert _lines(partitioned) == _lines(one_frame), args       # and the timeline


def test_events_merge_memory_is_chunks(disordered_run):
    """The merge gives out at least files x chunk events at a time (not a few per file: the frame
    of each batch has a fixed cost) and holds at most that plus a chunk per file (plus the records
    set aside as late); together the batches are every op, in time order."""
    from commtrace.analysis.partitioned.events_merge import _late_records
    from commtrace.trace import reader
    plan = plan_run(disordered_run)
    s = analyse(disordered_run, workers=1)
    chunk, files = 100, sum(len(m) for m in plan.ranks.values())
    frames = list(merged_events(plan.ranks, plan.refs, EventWindow(s.info["t0_ns"], None, None, None, None), chunk))
    late = 0
    for metas in plan.ranks.values():
        for m in metas:
            pt = reader.read_process(m, [], records=False)
            late += len(_late_records(pt, os.path.getsize(pt.ops_path) // schema.RECORD_SIZE, lambda t: t)[0])
    assert late > 1000                              # rank 1's and rank 3's files are far out of order
    sizes = [len(f) for f in frames]
    assert len(sizes) > 5 and min(sizes[:-1]) >= files * chunk and max(sizes) <= 2 * files * chunk + late
    t = np.concatenate([f["t_rel_ns"].to_numpy(np.int64) for f in frames])
    assert len(t) == s.ops and (np.diff(t) >= 0).all()


def test_help_names_the_views(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert "--events" in out and "streamed" in out


def test_events_file_gone_mid_list(tmp_path):
    """A trace file that goes away while the list is printed: one line, exit 2 (no traceback)."""
    from commtrace.errors import CommtraceError
    d = write_synthetic_run(str(tmp_path / "run"), ranks=2, ops_per_rank=3000, seed=1)
    plan = plan_run(d)
    s = analyse(d, workers=1)
    frames = merged_events(plan.ranks, plan.refs, EventWindow(s.info["t0_ns"], None, None, None, None), 256)
    assert len(next(frames))
    for f in os.listdir(d):
        if f.endswith(schema.OPS_SUFFIX):
            os.remove(os.path.join(d, f))
    with pytest.raises(CommtraceError, match="cannot read .* while listing the events"):
        list(frames)
