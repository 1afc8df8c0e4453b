"""A rank task's interval figures walked in time pieces (RankTimes.pieces) equal the whole rank's.

The piece size is forced down to a few ops, so pieces cut steps, compute spans, DDP gradient tails,
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
