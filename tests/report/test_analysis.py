"""Analysis functions on small hand-built frames (and traces: tests/tracebuilder.py)."""
import os
import sys

import numpy as np
import pandas as pd
import pytest

from commtrace.analysis.compare import delta_pct
from commtrace.analysis.match import match_ops
from commtrace.analysis.partitioned import analyse
from commtrace.analysis.summary import bus_factor
from oracle import op_summary
from commtrace.analysis.timeline import bin_timeline, event_rows, parse_time
from commtrace.errors import CommtraceError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tracebuilder import Proc, write_run  # noqa: E402


def frame(rows):
    """rows: (rank, op, seq, start, end, bytes[, root, iteration, phase])"""
    recs = []
    for r in rows:
        rank, op, seq, s, e, b = r[:6]
        root = r[6] if len(r) > 6 else None
        it = r[7] if len(r) > 7 else 0
        ph = r[8] if len(r) > 8 else None
        recs.append(dict(rank=rank, world="w", group="0", seq=seq, op=op, shapes="[[1]]", dtype="float32", bytes=b,
                         t_start_ns=s, t_return_ns=e, t_end_ns=e, duration_ns=None if e is None else e - s,
                         status="completed", iteration=it, group_size=2, out_bytes=b * (2 if op == "all_gather" else 1),
                         root=root, phase=ph))
    df = pd.DataFrame(recs)
    for c in ("t_return_ns", "t_end_ns", "duration_ns", "root"):
        df[c] = df[c].astype("Int64")
    for c in ("world", "group", "op", "shapes", "dtype", "status", "phase"):
        df[c] = df[c].astype("category")
    return df.sort_values(["t_start_ns", "rank"], kind="stable", ignore_index=True)


def two_rank():
    return frame([
        (0, "all_reduce", 1, 0, 100, 1000),
        (1, "all_reduce", 1, 30, 120, 1000),
        (0, "all_gather", 2, 200, 260, 10),
        (1, "all_gather", 2, 210, 300, 10),
        (0, "send", 1, 400, 450, 64, 1),
        (1, "recv", 1, 420, 460, 64, 0),
    ])


def test_bus_factor():
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert bus_factor("all_to_all", 2) == pytest.approx(0.5)
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("reduce", 8) == 1.0


def test_match_collectives_and_p2p():
    df = two_rank()
    m = match_ops(df)
    inst = m.instances
    assert len(inst) == 3
    ar = inst[inst["op"] == "all_reduce"].iloc[0]
    assert ar["ranks"] == 2 and ar["spread_ns"] == 30 and ar["last_rank"] == 1 and ar["slowest_ns"] == 100
    p2p = inst[inst["p2p"]]
    assert len(p2p) == 1 and p2p.iloc[0]["ranks"] == 2 and p2p.iloc[0]["spread_ns"] == 20


def test_unpaired_p2p_not_matched():
    df = frame([(0, "send", 1, 0, 10, 8, 1), (1, "recv", 1, 5, 15, 8, 3)])  # recv from 3, not 0
    assert len(match_ops(df).instances) == 2


def test_op_summary_numbers():
    df = two_rank()
    s = op_summary(df, match_ops(df))
    ar = s.loc["all_reduce"]
    assert ar["ops"] == 2 and ar["collectives"] == 1 and ar["bytes"] == 2000
    assert ar["mean_ns"] == pytest.approx(95.0)
    assert ar["p50_ns"] == pytest.approx(95.0)
    # slowest rank 100 ns, 1000 B -> 10 GB/s algbw, busbw * 2(n-1)/n = 1 for n=2.
    assert ar["algbw"] == pytest.approx(1000 / 100e-9)
    assert ar["busbw"] == pytest.approx(1000 / 100e-9)
    ag = s.loc["all_gather"]
    # total size (out_bytes 20) over the slowest rank's 90 ns, factor (n-1)/n = 0.5.
    assert ag["algbw"] == pytest.approx(20 / 90e-9)
    assert ag["busbw"] == pytest.approx(0.5 * 20 / 90e-9)
    total = 100 + 90 + 60 + 90 + 50 + 40
    assert ar["share"] == pytest.approx(190 / total)
    # cv of per-rank totals 100, 90: std 5 / mean 95.
    assert ar["cv"] == pytest.approx(5 / 95)


def test_summary_by_phase_keeps_missing_phase():
    df = frame([(0, "all_reduce", 1, 0, 10, 8, None, 1, "backward"), (1, "all_reduce", 1, 0, 10, 8, None, 1, "backward"),
                (0, "barrier", 2, 20, 30, 0), (1, "barrier", 2, 20, 30, 0)])
    s = op_summary(df, match_ops(df), ("phase", "op"))
    assert set(s.index) == {("backward", "all_reduce"), ("-", "barrier")}


def test_skew_stragglers(tmp_path):
    """Rank 1 calls each of 3 all_reduces 20 us after rank 0: 3 instances of spread 20 us,
    rank 1 last every time, the others waited 3 x 20 = 60 us for it."""
    p0, p1 = Proc(0), Proc(1)
    for k in range(1, 4):
        p0.op("all_reduce", 100 * k, 100 * k + 50, nbytes=8)
        p1.op("all_reduce", 100 * k + 20, 100 * k + 50, nbytes=8)
    sk = analyse(write_run(tmp_path, [p0, p1]), workers=1, progress=False).skew
    assert sk["instances"] == 3
    strag = sk["stragglers"]
    assert strag.index[0] == 1 and strag.iloc[0]["wait_ns"] == 60_000 and strag.iloc[0]["last"] == 3
    assert strag.iloc[0]["share_last"] == 1.0 and strag.iloc[0]["mean_spread_ns"] == 20_000
    assert sk["top"]["spread_ns"].tolist() == [20_000] * 3
    assert sk["by_op"].loc["all_reduce", "max_ns"] == 20_000


def test_comm_time_is_the_union_of_each_ranks_ops(tmp_path):
    """Rank 0: [0, 10) and [5, 12) overlap (12 us), then [20, 25) (5 us): 17 us; rank 1: 4 us."""
    p0, p1 = Proc(0), Proc(1)
    p0.op("all_reduce", 0, 10, nbytes=8).op("all_reduce", 5, 12, nbytes=8).op("barrier", 20, 25, nbytes=0)
    p1.op("all_reduce", 0, 4, nbytes=8)
    assert analyse(write_run(tmp_path, [p0, p1]), workers=1, progress=False).comm_ns == {0: 17_000, 1: 4_000}


def test_timeline_binning():
    df = frame([(0, "all_reduce", 1, 0, 50, 8), (1, "barrier", 1, 50, 100, 0)])
    tl = bin_timeline(df, 0, 10, 0, 100)
    ar, ba = tl.ops.index("all_reduce"), tl.ops.index("barrier")
    assert tl.cells[0].tolist() == [ar] * 5 + [-1] * 5
    assert tl.cells[1].tolist() == [-1] * 5 + [ba] * 5
    assert np.allclose(tl.fill[0][:5], 1.0)
    zoom = bin_timeline(df, 0, 4, 40, 60)
    assert zoom.cells[0].tolist() == [ar, ar, -1, -1]


def test_events_window():
    ev = event_rows(two_rank(), 0, 100, 400)
    assert ev["t_rel_ns"].tolist() == [200, 210, 400]


def test_parse_time():
    assert parse_time("1.5s") == 1_500_000_000
    assert parse_time("200ms") == 200_000_000
    assert parse_time("30us") == 30_000
    assert parse_time("7") == 7_000_000_000
    with pytest.raises(CommtraceError):
        parse_time("soon")


def test_delta_pct():
    assert delta_pct([0, 10], [5, 15]).tolist()[1] == pytest.approx(50.0)
    assert np.isnan(delta_pct([0], [5])[0])


def test_empty_frame_is_fine():
    df = two_rank().iloc[0:0]
    m = match_ops(df)
    assert len(m.instances) == 0
    assert len(op_summary(df, m)) == 0
