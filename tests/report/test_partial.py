"""The analysis (commtrace.analysis.partitioned.analyse) gives the same numbers in many partitions as in one:
serial, in a process pool and on a real Dask LocalCluster, on real and synthetic runs."""
import math

import numpy as np
import pandas as pd
import pytest

from commtrace import native
from commtrace.analysis import native_ext
from commtrace.analysis.partitioned import analyse, scan
from commtrace.analysis.partitioned.sketch import ALPHA, LogSketch
from commtrace.analysis.partitioned import analyse
from commtrace.analysis.run_info import load_report_run
from commtrace.errors import CommtraceError
from commtrace.trace.reader import load_run
from synthetic import write_synthetic_run

TOP_COLS = ["op", "group", "seq", "ranks", "spread_ns", "last_rank", "first_rank", "first_start_ns"]


def one_frame_busbw(rep) -> float:
    """Bus bandwidth over every collective (not p2p) of a one-frame report, from its matched
    instances: sum(S * factor) / sum(T) over those with their slowest rank's time (docs/report.md) -- the reference the analysis must give."""
    from commtrace.analysis.summary import bus_factors
    inst = rep.op_view.matched.instances
    if not len(inst):
        return float("nan")
    inst = inst[~inst["p2p"].to_numpy(dtype=bool)]
    T = inst["slowest_ns"].to_numpy(dtype=np.float64)
    S = inst["size_bytes"].to_numpy(dtype=np.float64)
    ok = np.isfinite(T) & (T > 0) & (S > 0) & ~inst["untimed"].to_numpy(dtype=bool)
    if not ok.any():
        return float("nan")
    return float((S[ok] * bus_factors(inst)[ok]).sum() / (T[ok].sum() * 1e-9))


@pytest.fixture(scope="module")
def two_groups_run(tmp_path_factory):
    """8 ranks, p2p ring, a slow rank, many seq chunks (so partitions split every group)."""
    d = str(tmp_path_factory.mktemp("partial") / "run")
    return write_synthetic_run(d, ranks=8, ops_per_rank=2000, seed=3, p2p=True, slow_rank=5)


def assert_same(rep, s):
    for name in ("by_op", "by_group", "by_phase"):
        a, b = getattr(rep, name), getattr(s, name)
        if a is None:
            assert b is None
            continue
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-12)
    if rep.steps is None:
        assert s.steps is None
    else:
        pd.testing.assert_frame_equal(rep.steps.per_rank, s.steps.per_rank)
        pd.testing.assert_frame_equal(rep.steps.across, s.steps.across)
        pd.testing.assert_frame_equal(rep.steps.outside, s.steps.outside)
        assert rep.steps.total_steps == s.steps.total_steps
    assert rep.skew["instances"] == s.skew["instances"]
    if rep.skew["instances"]:
        pd.testing.assert_frame_equal(rep.skew["stragglers"], s.skew["stragglers"], check_exact=False, rtol=1e-12)
        a, b = rep.skew["by_op"], s.skew["by_op"]
        a = a.set_axis(a.index.astype(str), axis=0)
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-12, check_index_type=False,
                                      check_dtype=False)
        ta = rep.skew["top"][TOP_COLS].reset_index(drop=True).astype({"op": str, "group": str})
        tb = s.skew["top"][TOP_COLS].reset_index(drop=True).astype({"op": str, "group": str})
        pd.testing.assert_frame_equal(ta, tb, check_dtype=False)
    busbw = one_frame_busbw(rep)
    assert (math.isnan(busbw) and math.isnan(s.busbw)) or s.busbw == pytest.approx(busbw, rel=1e-12)
    assert s.ops == len(rep.op_view.frame)


@pytest.mark.parametrize("workers", [1, 2])
def test_partial_equals_report_synthetic(two_groups_run, workers):
    rep = analyse(two_groups_run, op_view=True)
    s = analyse(two_groups_run, workers=workers, memory_limit=1 << 20)   # tiny limit: many partitions
    assert s.exact and s.executor == ("serial" if workers == 1 else "processes")
    assert_same(rep, s)
    # rank-keyed results in rank order, whichever order the pool's tasks finished in
    assert list(s.comm_ns) == list(range(8)) and list(s.info["comm_ns_per_rank"]) == list(range(8))


def test_partial_equals_report_real_runs(real_run, accum_run):
    for run in (real_run, accum_run):
        assert_same(analyse(run, op_view=True), analyse(run, workers=1, memory_limit=1 << 20))


def test_same_tables_with_and_without_the_analysis_kernels(two_groups_run, real_run, monkeypatch):
    """The analysis, whole and in partitions, with the compiled analysis kernels equal
    both with numpy's (COMMTRACE_NATIVE=0), on a synthetic run and on a real DDP run."""
    if native_ext.kernels() is None:
        pytest.skip(f"analysis kernels not built (commtrace build-native): {native.error(native_ext.EXTENSION)}")
    for run in (two_groups_run, real_run):
        monkeypatch.setenv("COMMTRACE_NATIVE", "0")
        rep = analyse(run, op_view=True)
        assert rep.steps is not None and len(rep.steps.per_rank) > 0 and rep.steps.per_rank["compute_ns"].any()
        assert_same(rep, analyse(run, workers=1, memory_limit=1 << 20))
        monkeypatch.setenv("COMMTRACE_NATIVE", "1")
        assert native_ext.kernels() is not None
        assert_same(rep, analyse(run, workers=1, memory_limit=1 << 20))
        with_kernels = analyse(run, op_view=True)
        for name in ("per_rank", "across", "outside"):
            pd.testing.assert_frame_equal(getattr(rep.steps, name), getattr(with_kernels.steps, name))


def test_dask_local_cluster_equals_embedded(two_groups_run):
    distributed = pytest.importorskip("distributed")
    embedded = analyse(two_groups_run, workers=2)
    rep = analyse(two_groups_run, op_view=True)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  ) as cluster, distributed.Client(cluster) as client:
        on_dask = analyse(two_groups_run, dask=client)
        by_address = analyse(two_groups_run, dask=cluster.scheduler_address)
    assert on_dask.executor == "dask" and on_dask.workers == 2
    assert_same(rep, on_dask)
    assert_same(rep, by_address)
    pd.testing.assert_frame_equal(embedded.by_op, on_dask.by_op)


def test_sketched_percentiles_within_bound(two_groups_run):
    s = analyse(two_groups_run, workers=1, exact=False)
    assert not s.exact and s.quantile_error == ALPHA
    frame = load_run(two_groups_run).frame
    for op, row in s.by_op.iterrows():
        d = np.sort(frame.loc[frame["op"] == op, "duration_ns"].dropna().to_numpy(np.float64))
        for q, col in ((0.5, "p50_ns"), (0.99, "p99_ns")):
            v = d[int(math.floor(q * (len(d) - 1)))]
            assert abs(row[col] - v) <= ALPHA * v, (op, col)
    rep = analyse(two_groups_run, op_view=True)
    pd.testing.assert_series_equal(rep.by_op["total_ns"], s.by_op["total_ns"])


def test_sketch_hand_computed():
    # 1..1000: the value of rank floor(0.5 * 999) = 499 is 500; of rank floor(0.99 * 999) = 989 is 990.
    vals = np.arange(1, 1001, dtype=np.float64)
    sk = LogSketch.of(vals)
    assert sk.n == 1000
    assert abs(sk.quantile(0.5) - 500) <= ALPHA * 500
    assert abs(sk.quantile(0.99) - 990) <= ALPHA * 990
    halves = LogSketch.of(vals[::2]).merge(LogSketch.of(vals[1::2]))
    assert np.array_equal(halves.counts, sk.counts) and halves.lo == sk.lo
    with_zero = LogSketch.of(np.array([0.0, 0.0, 5.0, np.nan]))
    assert with_zero.n == 3 and with_zero.quantile(0.0) == 0.0 and abs(with_zero.quantile(1.0) - 5) <= 5 * ALPHA
    assert math.isnan(LogSketch.of(np.array([np.nan])).quantile(0.5))


def test_scan_parts_are_the_loaded_frame(two_groups_run):
    parts = scan(two_groups_run)
    assert [p.rank for p in parts] == list(range(8))
    whole = load_run(two_groups_run).frame
    for p in parts[:3]:
        f = p.load()
        mine = whole[whole["rank"] == p.rank].reset_index(drop=True)
        assert len(f) == len(mine)
        assert np.array_equal(f["t_start_ns"].to_numpy(), mine["t_start_ns"].to_numpy())
        assert f["duration_ns"].sum() == mine["duration_ns"].sum()


def test_bad_run_dir(tmp_path):
    with pytest.raises(CommtraceError, match="no trace files"):
        analyse(str(tmp_path), workers=1)


def test_no_module_named_no_module_figures(tmp_path):
    """The plan tells whether any sig names a module: if none does, no rank task computes
    per-module figures, and the report has no per-module table either way."""
    from commtrace.analysis.partitioned.plan import plan_run
    plain = write_synthetic_run(str(tmp_path / "plain"), ranks=2, ops_per_rank=200, annotate=False)
    ddp = write_synthetic_run(str(tmp_path / "ddp"), ranks=2, ops_per_rank=200)   # DDP's backward buckets
    assert plan_run(plain).modules is False and plan_run(ddp).modules is True
    assert analyse(plain, workers=1, progress=False).by_module is None
    table = analyse(ddp, workers=1, progress=False).by_module
    assert table.loc[("DistributedDataParallel", "backward"), "ranks"] == 2


def _tables_part(text: str) -> str:
    """The report from its step table through the skew tables (what both analyses print)."""
    start = text.index("\nSteps (")
    end = text.index("\nTimeline") if "\nTimeline" in text else len(text)
    return text[start:end].strip()


def test_cli_partitioned_prints_the_same_tables(two_groups_run, capsys):
    from commtrace.cli import main
    assert main(["report", two_groups_run, "--width", "160"]) == 0
    one_frame = capsys.readouterr().out
    # a memory limit the one frame would not fit: the report goes file by file by itself
    assert main(["report", two_groups_run, "--width", "160", "--memory-limit", "2M"]) == 0
    partitioned = capsys.readouterr().out
    assert "partitioned (" in partitioned and "\nTimeline  " in partitioned
    assert _tables_part(one_frame) == _tables_part(partitioned)
    assert one_frame[one_frame.index("\nTimeline"):] == partitioned[partitioned.index("\nTimeline"):]


def test_cli_partitioned_json_and_bad_input(two_groups_run, tmp_path, capsys):
    import json
    from commtrace.cli import main
    out = tmp_path / "s.json"
    assert main(["report", two_groups_run, "--partitioned", "--json", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    rep = analyse(two_groups_run, op_view=True)
    assert doc["partitioned"] and doc["run"]["ops"] == len(rep.op_view.frame)
    assert [r["op"] for r in doc["by_op"]] == list(rep.by_op.index)
    assert [r["collectives"] for r in doc["by_op"]] == rep.by_op["collectives"].tolist()
    assert doc["skew"]["instances"] == rep.skew["instances"]
    capsys.readouterr()
    assert main(["report", two_groups_run, "--memory-limit", "lots"]) == 2
    assert "--memory-limit lots: not a size" in capsys.readouterr().err


def test_cli_compare_partitioned_prints_the_same(two_groups_run, tmp_path, capsys):
    from commtrace.cli import main
    exp = write_synthetic_run(str(tmp_path / "exp"), ranks=8, ops_per_rank=2000, seed=4, p2p=True, buckets=3)
    for extra in ([], ["--by", "group,op"], ["--by", "op,bytes,rank"], ["--by", "bucket,params"]):
        assert main(["compare", two_groups_run, exp, "--width", "160", *extra]) == 0
        one_frame = capsys.readouterr().out
        assert main(["compare", two_groups_run, exp, "--width", "160", "--partitioned", *extra]) == 0
        assert capsys.readouterr().out == one_frame


def test_perfetto_pieces_plan():
    from commtrace.analysis.partitioned import perfetto_pieces
    # 10 ops per file: ranks 0+1 (4+5), rank 2 (7: 2+7 > 10 starts a new file), rank 3 (25: 3 time windows), rank 4
    assert perfetto_pieces({0: 4, 1: 5, 2: 7, 3: 25, 4: 1}, 10) == [
        ([0, 1], None, 1), ([2], None, 1), ([3], 0, 3), ([3], 1, 3), ([3], 2, 3), ([4], None, 1)]


def test_piece_span_cuts_time_without_gap_or_overlap():
    """10 ops starting at 0, 10, ..., 90 in 3 pieces: ops 0-2, 3-5, 6-9; the times owned
    (-, 30), [30, 60), [60, -) meet end to end. One piece: every op, all of time."""
    from commtrace.analysis.partitioned import piece_span
    starts = np.arange(0, 100, 10)
    assert [piece_span(starts, k, 3) for k in range(3)] == [(0, 3, None, 30), (3, 6, 30, 60), (6, 10, 60, None)]
    assert piece_span(starts, 0, 1) == (0, 10, None, None)


def test_cli_partitioned_perfetto_in_pieces(two_groups_run, tmp_path, capsys):
    import glob
    import json
    from commtrace.cli import main
    out = tmp_path / "t.json"
    # 2,000 ops per rank; 1 MB = 1,000 ops per file: every rank in 2 time windows
    assert main(["report", two_groups_run, "--partitioned", "--perfetto", str(out), "--perfetto-max-mb", "1",
                 "-q"]) == 0
    assert "Perfetto trace in 16 file(s) of at most 1 MB" in capsys.readouterr().err
    files = sorted(glob.glob(str(tmp_path / "t.rank-*.json")))
    assert len(files) == 16 and any(f.endswith("t.rank-5.part-2-of-2.json") for f in files)
    slices = 0
    for f in files:
        events = json.load(open(f))["traceEvents"]
        slices += sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in ("collective", "p2p"))
    assert slices == 8 * 2000
    assert main(["report", two_groups_run, "--partitioned", "--perfetto", str(out), "--perfetto-max-mb", "0"]) == 2


@pytest.mark.parametrize("case", ["missing_rank_two_hosts", "no_annotations", "torn_ops_file"])
def test_partial_equals_report_odd_runs(tmp_path, case):
    """A rank missing and clock lines; no phases or spans; a file cut mid-record."""
    import os
    d = str(tmp_path / case)
    kw = {"missing_rank_two_hosts": dict(missing_ranks=(2,), hosts=2), "no_annotations": dict(annotate=False),
          "torn_ops_file": {}}[case]
    write_synthetic_run(d, ranks=5, ops_per_rank=600, seed=7, p2p=case != "no_annotations", **kw)
    if case == "torn_ops_file":
        f = os.path.join(d, next(x for x in os.listdir(d) if x.startswith("rank1.") and x.endswith(".ops.bin")))
        os.truncate(f, os.path.getsize(f) - 32 * 100 - 7)
    s = analyse(d, workers=1, memory_limit=1 << 20)
    one_frame = load_report_run(d)
    assert_same(analyse(d, op_view=True), s)
    # The reader's issues, as objects, each once (the rank tasks re-read the meta files).
    assert sorted(map(str, s.issues)) == sorted(map(str, one_frame.issues))
    if case == "torn_ops_file":
        from commtrace.trace.reader import TRUNCATED
        (torn,) = [i for i in s.issues if i.kind == TRUNCATED]
        assert (torn.rank, torn.problem) == (1, "truncated mid-record (25 trailing bytes ignored)")


def test_first_seen_codes_are_factorize_codes():
    """Instances are numbered as pd.factorize numbers them (first appearance), by a table."""
    from commtrace.analysis.partitioned.partition_map import _first_seen_codes
    assert _first_seen_codes(np.array([7, 3, 7, 9, 3, 3])).tolist() == [0, 1, 0, 2, 1, 1]
    rng = np.random.default_rng(0)
    for n, hi in ((1, 5), (50, 10), (10_000, 3_000)):
        keys = rng.integers(0, hi, n)
        assert _first_seen_codes(keys).tolist() == pd.factorize(keys)[0].tolist()


def test_distinct_pairs_of_a_partition_are_the_distinct_pairs():
    """Per table, each (row, instance) pair once: the instance's first op's row first (in
    instance order), then the other rows its ops were filed under, sorted."""
    from commtrace.analysis.summary import distinct_pairs
    rng = np.random.default_rng(3)
    for _ in range(50):
        n, k, cells = int(rng.integers(1, 60)), int(rng.integers(1, 8)), int(rng.integers(1, 6))
        inst = np.concatenate((np.arange(k), rng.integers(0, k, n)))      # every instance has an op
        cell = rng.integers(0, cells, len(inst))
        rowkey = rng.integers(0, 3, cells)                                 # several cells share a row
        first = {}
        for c, i in zip(cell.tolist(), inst.tolist()):
            first.setdefault(i, c)
        head = np.array([first[i] for i in range(k)])
        other = np.flatnonzero(cell != head[inst])
        pg, pi = distinct_pairs(rowkey[head], rowkey[cell[other]], inst[other])
        pairs = list(zip(pg.tolist(), pi.tolist()))
        assert sorted(pairs) == sorted(set(zip(rowkey[cell].tolist(), inst.tolist())))
        assert pairs[:k] == [(int(rowkey[first[i]]), i) for i in range(k)]
        assert pairs[k:] == sorted(pairs[k:], key=lambda p: (p[0], p[1]))


def test_per_rank_medians_when_the_step_rows_are_cut(two_groups_run, monkeypatch):
    """Over merge.PER_RANK_ROWS_KEPT (rank, step) rows the per-rank table becomes medians per
    rank: those of the one frame's per-rank rows, whichever rank's rows crossed the limit."""
    from commtrace.analysis.partitioned import merge
    rep = analyse(two_groups_run, op_view=True)
    pr = rep.steps.per_rank
    want = pr.groupby("rank")[merge.MEDIAN_COLUMNS].median()
    want.insert(0, "steps", pr.groupby("rank").size().astype(np.int64))
    assert len(want) == 8 and pr.groupby("rank").size().min() > 3
    kept = analyse(two_groups_run, workers=1, progress=False)
    assert not kept.per_rank_cut and kept.rank_medians.empty      # the rows themselves are there
    monkeypatch.setattr(merge, "PER_RANK_ROWS_KEPT", 3 * len(pr) // 8 + 1)   # cut at the 4th rank
    s = analyse(two_groups_run, workers=1, progress=False)
    assert s.per_rank_cut and len(s.steps.per_rank) == 0
    pd.testing.assert_frame_equal(s.rank_medians, want, check_index_type=False)
    pd.testing.assert_frame_equal(s.steps.across, rep.steps.across)
