"""A rank task's interval figures walked in time pieces (RankTimes.pieces) equal the whole rank's.

The piece size (and the chunk size of whole-rank passes) is forced down to a few ops, so pieces cut steps, compute spans, DDP gradient tails,
regions, module sets and ops still in flight; every figure of the report (``--json``, terminal) and
of the rank task's result must be the same as with the rank in one piece."""
import json

import numpy as np
import pytest

from commtrace.analysis.partitioned import plan as run_plan, rank_map
from commtrace.analysis.step_table import RankTimes, WaitColumns
from commtrace.analysis.partitioned.rank_ops import rank_ops

import scenarios
from helpers import commtrace_main
from synthetic import write_synthetic_run

WINDOWS = ([], ["--steps", "2:"], ["--from", "20us", "--to", "150us", "--phase", "backward"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pieces")
    return {"ddp": scenarios.ddp_two_steps(root / "ddp"), "accumulation": scenarios.accumulation(root / "acc"),
            "join": scenarios.join(root / "join"), "regions": scenarios.regions(root / "regions"),
            "synthetic": write_synthetic_run(str(root / "syn"), ranks=3, ops_per_rank=1500, p2p=True, slow_rank=1)}


def _report(run, flags, tmp_path, monkeypatch, piece_ops):
    monkeypatch.setattr(rank_map, "MIN_PIECE_OPS", piece_ops)
    monkeypatch.setattr(rank_map, "PIECES_PER_RUN", 1 << 40)     # piece_size: MIN_PIECE_OPS whatever the run
    monkeypatch.setattr(rank_map, "CHUNK_OPS", piece_ops)        # whole-rank passes (durations, bytes per step)
    monkeypatch.setattr(rank_map, "RECORD_PIECE", piece_ops)     # records read at a time (reader.record_pieces)
    out = tmp_path / f"{piece_ops}.json"
    res = commtrace_main("report", run, "--width", "120", "--json", out, *flags)
    return res.returncode, res.stdout, res.stderr, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.parametrize("name", ["ddp", "accumulation", "join", "regions", "synthetic"])
def test_report_in_pieces_equals_the_whole_rank(runs, name, tmp_path, monkeypatch):
    for flags in WINDOWS:
        whole = _report(runs[name], flags, tmp_path, monkeypatch, 1 << 40)
        for piece in (1, 7):
            assert _report(runs[name], flags, tmp_path, monkeypatch, piece) == whole, (flags, piece)


def test_pieces_cut_the_rank_and_add_up(runs):
    """RankTimes.pieces itself: many pieces, each inside its cut, their lengths the whole rank's."""
    from commtrace.analysis import intervals as iv
    from commtrace.trace import reader
    plan = run_plan.plan_run(runs["synthetic"])
    procs, refs = run_plan.read_rank(plan.ranks[1], plan.refs, [])
    spans, _, _ = reader.build_mark_tables(procs, [], refs, user_marks=False)
    ops = rank_ops(procs, refs, 1)
    assert isinstance(ops.waits, WaitColumns)
    times = RankTimes(ops.waits, ops.arrays, spans)
    whole = times.of(1)
    pieces = list(times.pieces(1, 100))
    assert len(pieces) >= 10 and pieces[0].first and not any(p.first for p in pieces[1:])
    for name in ("comm", "compute", "exposed"):
        sets = [getattr(p, name) for p in pieces]
        for p, s in zip(pieces, sets):
            assert not len(s[0]) or (s[0][0] >= p.cut[0] and s[1][-1] <= p.cut[1])
        assert sum(iv.length(s) for s in sets) == iv.length(getattr(whole, name)) > 0
        joined = iv.union(np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets]))
        assert all((a == b).all() for a, b in zip(joined, getattr(whole, name)))


def test_map_rank_in_pieces_equals_the_whole_rank(runs):
    plan = run_plan.plan_run(runs["synthetic"])
    for r, metas in plan.ranks.items():
        got = [rank_map.map_rank(rank_map.RankTask(r, metas, plan.refs, True, 64, modules=True, piece=p))
               for p in (0, 3, 250)]
        for p in got[1:]:
            assert (p.comm_ns, p.outside, p.regions, p.modules, p.cells.keys()) == \
                (got[0].comm_ns, got[0].outside, got[0].regions, got[0].modules, got[0].cells.keys())
            a, b = p.per_rank.unpack(), got[0].per_rank.unpack()
            assert a.keys() == b.keys() and all((a[k] == b[k]).all() and a[k].dtype == b[k].dtype for k in a)


def test_rank_ops_lets_the_records_go(runs):
    """rank_ops takes the records: nothing it returns views them (a view of d_return kept all 32 B/op
    of them alive through the rest of the rank task)."""
    import gc
    import weakref
    plan = run_plan.plan_run(runs["synthetic"])
    procs, refs = run_plan.read_rank(plan.ranks[1], plan.refs, [])
    held = [weakref.ref(p.records) for p in procs]
    ops = rank_ops(procs, refs, 1)
    gc.collect()
    assert len(ops.arrays.start) == 1500 and all(p.records is None for p in procs)
    assert all(r() is None for r in held)


def test_gradient_tails_chunk_by_chunk_equal_the_whole():
    """The DDP gradient tails with the launches read a few ops at a time (the latest per pass is a max)."""
    from commtrace.analysis.step_table import _ddp_gradient_tails
    rng = np.random.default_rng(7)
    starts = np.sort(rng.integers(0, 10**6, 5000))
    grad = rng.random(5000) < 0.7
    b = np.sort(rng.integers(0, 10**6, 300))
    e = b + rng.integers(0, 5000, 300)
    whole = _ddp_gradient_tails(starts, grad, b, e, chunk=1 << 20)
    assert len(whole[0]) > 100
    order = rng.permutation(300)            # passes out of order: sorted first
    for chunk in (1, 7, 999):
        got = _ddp_gradient_tails(starts, grad, b[order], e[order], chunk=chunk)
        assert all((x == y).all() for x, y in zip(got, whole))
    assert not len(_ddp_gradient_tails(starts, np.zeros(5000, bool), b, e, 0)[0])


def test_rank_ops_holds_offsets_whose_times_equal_the_whole(runs):
    """rank_ops keeps the records' float32 offsets, not each op's return time, its flag and its duration
    (17 B/op): the return times WaitColumns derives for any rows, and the durations read a few ops at a
    time, equal op_times' over the whole rank (also with returns and ends unknown: NaN offsets)."""
    import dataclasses
    from commtrace.analysis.arrays import op_times
    plan = run_plan.plan_run(runs["synthetic"])
    procs, refs = run_plan.read_rank(plan.ranks[1], plan.refs, [])
    ops = rank_ops(procs, refs, 1, lean=True)
    a, (d_return, d_end) = ops.arrays, ops.offsets
    assert a.dur is None and ops.waits.ret is None and d_return.dtype == d_end.dtype == np.float32
    assert (op_times(d_return, d_end, a.start)[2] == a.end).all()
    d_return, d_end = d_return.copy(), d_end.copy()
    d_return[::7], d_end[::5] = np.nan, np.nan
    ret, unknown, end, dur = op_times(d_return, d_end, a.start)
    a = dataclasses.replace(a, end=end)
    ops = dataclasses.replace(ops, arrays=a, offsets=(d_return, d_end),
                              waits=dataclasses.replace(ops.waits, a=a, offsets=(d_return, d_end)))
    for chunk in (0, 1, 7, 999):
        assert np.array_equal(ops.durations(chunk), dur, equal_nan=True)
    framed = WaitColumns(a, ret, unknown, ops.waits.in_place, ops.waits.grad)
    rng = np.random.default_rng(3)
    for rows in (np.arange(len(end)), np.arange(100, 900), np.sort(rng.choice(len(end), 300, replace=False))):
        assert all((x == y).all() for x, y in zip(ops.waits.of(rows), framed.of(rows)))


def test_bytes_per_step_chunk_by_chunk_equal_the_whole(runs):
    """StepFigures adds each step's ops and bytes ``chunk`` ops at a time: the same sums (in row order)."""
    from commtrace.analysis.steps import begin_at_first_op, find_steps, locate_ops
    from commtrace.analysis.step_table import ops_per_step
    from commtrace.trace import reader
    plan = run_plan.plan_run(runs["ddp"])
    for r, metas in plan.ranks.items():
        procs, refs = run_plan.read_rank(metas, plan.refs, [])
        spans, _, _ = reader.build_mark_tables(procs, [], refs, user_marks=False)
        ops = rank_ops(procs, refs, r)
        steps = begin_at_first_op(find_steps(spans), spans, ops.arrays)
        op_step = locate_ops(ops.arrays, steps)[0]
        whole = ops_per_step(steps, ops.arrays, op_step, None, 0)
        assert len(steps) and whole[1].sum() > 0
        selected = np.arange(len(op_step)) % 3 > 0
        for chunk in (1, 2, 5):
            got = ops_per_step(steps, ops.arrays, op_step, None, chunk)
            assert (got[0] == whole[0]).all() and (got[1] == whole[1]).all()
            a, b = ops_per_step(steps, ops.arrays, op_step, selected, chunk), ops_per_step(steps, ops.arrays, op_step, selected, 0)
            assert (a[0] == b[0]).all() and (a[1] == b[1]).all()


@pytest.mark.parametrize("name", ["ddp", "accumulation", "join", "regions", "synthetic"])
def test_busy_time_in_chunks_equals_the_whole_union(runs, name):
    """RankTimes keeps each rank's busy time (the union of its compute spans, instead of the spans), built a
    chunk of spans at a time: bit for bit the one-piece union, and every rank's sets the same."""
    from commtrace.analysis import intervals as iv
    from commtrace.trace import reader
    plan = run_plan.plan_run(runs[name])
    for r, metas in plan.ranks.items():
        procs, refs = run_plan.read_rank(metas, plan.refs, [])
        spans, _, _ = reader.build_mark_tables(procs, [], refs, user_marks=False)
        ops = rank_ops(procs, refs, r)
        whole = RankTimes(ops.waits, ops.arrays, spans)
        rows = spans["rank"].to_numpy() == r
        union = iv.union(spans["t_begin_ns"].to_numpy()[rows], spans["t_end_ns"].to_numpy()[rows])
        assert all((a == b).all() for a, b in zip(whole.busy.get(r, iv.empty()), union))
        for chunk in (1, 2, 7):
            got = RankTimes(ops.waits, ops.arrays, spans, chunk=chunk)
            assert got.busy.keys() == whole.busy.keys() and got.tails.keys() == whole.tails.keys()
            for k in whole.busy:
                for a, b in zip((*got.busy[k], *got.tails[k]), (*whole.busy[k], *whole.tails[k])):
                    assert a.dtype == b.dtype and (a == b).all(), (name, r, chunk)
            t, w = got.of(r), whole.of(r)
            for a, b in zip((*t.comm, *t.compute, *t.exposed), (*w.comm, *w.compute, *w.exposed)):
                assert (a == b).all(), (name, r, chunk)


@pytest.mark.parametrize("name", ["ddp", "regions", "synthetic"])
def test_one_rank_rows_as_a_range_equal_an_index(runs, name):
    """A rank task's one rank has its rows as a range (no index array: 4 B/op held); every piece's sets and rows
    and the ops and bytes per step equal those read through the index array of the same rows, with a window too."""
    import dataclasses

    from commtrace.analysis.step_table import ops_per_step
    from commtrace.analysis.steps import begin_at_first_op, find_steps, locate_ops
    from commtrace.trace import reader
    plan = run_plan.plan_run(runs[name])
    for r, metas in plan.ranks.items():
        procs, refs = run_plan.read_rank(metas, plan.refs, [])
        spans, _, _ = reader.build_mark_tables(procs, [], refs, user_marks=False)
        ops = rank_ops(procs, refs, r)
        a = ops.arrays
        assert a.rank_rows()[r] == range(len(a.start))
        b = dataclasses.replace(a)
        b._rank_rows = {r: np.arange(len(a.start), dtype=np.int32)}       # the index the rows were before
        steps = begin_at_first_op(find_steps(spans), spans, a)
        op_step = locate_ops(a, steps)[0]
        assert (op_step == locate_ops(b, steps)[0]).all()
        for selected in (None, np.arange(len(a.start)) % 3 > 0):
            x, y = ops_per_step(steps, a, op_step, selected, 7), ops_per_step(steps, b, op_step, selected, 7)
            assert all((p == q).all() for p, q in zip(x, y))
            for size in (0, max(1, len(a.start) // 5)):
                got = [RankTimes(dataclasses.replace(ops.waits, a=arr), arr, spans, selected).pieces(r, size)
                       for arr in (a, b)]
                n = 0
                for p, q in zip(*got):
                    n += 1
                    assert all((u == v).all() for s, t in zip((p.comm, p.compute, p.exposed),
                                                              (q.comm, q.compute, q.exposed)) for u, v in zip(s, t))
                    assert (p.rows is None) == (q.rows is None) and p.cut == q.cut
                    assert p.rows is None or list(p.rows) == list(q.rows)
                assert n >= (2 if size and len(a.start) >= 10 else 1)
