"""The reader's clock model (trace.clocks), the test-only host simulation
(trace.simhost), and the per-host summary and banner rows, on hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest

from commtrace.analysis.run_info import clock_summary
from commtrace.render.terminal import clock_rows
from commtrace.trace import clocks, schema, simhost
from commtrace.trace.reader import ProcessTrace

S = 1_000_000_000


def proc(host="a", lines=(), wall=10 * S, mono=S):
    return ProcessTrace("p", "p.meta.jsonl", "p.ops.bin", header={"host": host, "t_wall_ns": wall, "t_mono_ns": mono},
                        clocks=[{"type": "clock", **c} for c in lines])


def line(t, offset, rtt, method="gloo-pingpong", world_id="w"):
    return {"t_mono_ns": t, "offset_ns": offset, "rtt_ns": rtt, "method": method, "world_id": world_id}


REF = proc("a", [line(0, 0, 0), line(100 * S, 0, 0)])


def test_reference_and_same_host():
    assert clocks.fit(REF, REF, "w").methods == ("reference",)
    near = proc("a", [line(5, 300, 20_000)])
    c = clocks.fit(near, REF, "w")
    assert (c.methods, c.uncertainty_ns) == (("same-host",), 0)
    assert c.offset(np.array([1, 2])).tolist() == [0, 0]
    # Another host name, but its clock line says it shares rank 0's machine (a container).
    container = proc("container-7", [line(5, 0, 0, method="same-host")])
    assert clocks.fit(container, REF, "w").methods == ("same-host",)


def test_drift_line_held_constant_outside_the_measured_range():
    # Offsets 100 ns at t=0 and 300 ns at t=100 s: drift 2 ns per 100 s = 0.002 ppm.
    c = clocks.fit(proc("b", [line(0, 100, 10_000), line(100 * S, 300, 10_000)]), REF, "w")
    assert c.methods == ("gloo-pingpong",) and c.measurements == 2 and c.span_ns == 100 * S
    assert c.offset(np.array([-5 * S, 0, 50 * S, 100 * S, 200 * S])).tolist() == [100, 100, 200, 300, 300]
    assert c.drift_ppm == pytest.approx(0.002)
    assert (c.rtt_ns, c.residual_ns, c.uncertainty_ns) == (10_000, 0, 5_001)  # rtt/2 + 1 ns rounding


def test_bound_grows_past_the_last_measurement():
    # Measured at 0 and 100 s, the process ran until 110 s (no exit measurement):
    # 10 s at 100 ppm adds 1 ms to the 5 us of the measurements.
    p = proc("b", [line(0, 100, 10_000), line(100 * S, 300, 10_000)])
    p.end = {"t_mono_ns": 110 * S}
    c = clocks.fit(p, REF, "w")
    assert (c.beyond_ns, c.uncertainty_ns) == (10 * S, 5_000 + 1_000_000 + 1)
    assert c.offset(np.array([110 * S])).tolist() == [300]


def test_a_poor_measurement_between_good_ones_costs_nothing():
    # Three points on one line; the middle one had a 1 ms round trip (bound 500 us).
    lines = [line(0, 100, 10_000), line(50 * S, 200, 1_000_000), line(100 * S, 300, 10_000)]
    c = clocks.fit(proc("b", lines), REF, "w")
    assert c.uncertainty_ns == 5_001 and c.rtt_ns == 10_000


def test_residual_widens_the_bound():
    # Equal weights (rtt 10 us): the line through (0, 0), (1 s, 0), (2 s, 3000) is
    # y = 1500 t - 500 (t in s); residuals 500, 1000, 500; bound at the ends 5000 + 500.
    lines = [line(0, 0, 10_000), line(S, 0, 10_000), line(2 * S, 3_000, 10_000)]
    c = clocks.fit(proc("b", lines), REF, "w")
    assert c.offset(np.array([0, S, 2 * S])).round().tolist() == [-500, 1000, 2500]
    assert c.residual_ns == 1_000
    # [0, 1 s]: best left 5500 (t=0), best right min(6000, 5500) = 5500 -> 5500; [1 s, 2 s]: 5500.
    assert c.uncertainty_ns == 5_501


def test_lines_of_another_world_or_another_mpi_root_are_not_used():
    other_world = proc("b", [line(0, 7 * S, 10_000, world_id="x")])
    assert clocks.fit(other_world, REF, "w").methods == ("wall-clock",)
    mpi = [line(0, 700, 10_000, method="mpi-pingpong", world_id=None)]
    assert clocks.fit(proc("b", mpi), REF, "w").methods == ("mpi-pingpong",)
    # The world's rank 0 was not MPI's rank 0 (its own MPI line has an offset).
    not_root = proc("a", [line(0, 55, 9_000, method="mpi-pingpong", world_id=None)])
    assert clocks.fit(proc("b", mpi), not_root, "w").methods == ("wall-clock",)
    both = mpi + [line(S, 700, 20_000)]
    assert clocks.fit(proc("b", both), REF, "w").methods == ("gloo-pingpong", "mpi-pingpong")


def test_wall_clock_fallback_and_unaligned():
    c = clocks.fit(proc("b", wall=20 * S, mono=2 * S), proc("a", wall=10 * S, mono=S), "w")
    # (20 s - 2 s) - (10 s - 1 s) = 9 s
    assert (c.methods, c.uncertainty_ns) == (("wall-clock",), None)
    assert c.offset(np.array([0])).tolist() == [9 * S]
    assert clocks.fit(proc("b"), None, "w").methods == ("unaligned",)


def test_untrusted_clock_lines_ignored():
    bad = [{"t_mono_ns": 0, "offset_ns": 1 << 70, "rtt_ns": 1, "world_id": "w"},
           {"t_mono_ns": 0, "offset_ns": 5, "rtt_ns": True, "world_id": "w"},
           {"t_mono_ns": 0, "offset_ns": 5, "rtt_ns": -3, "world_id": "w"},
           {"t_mono_ns": 0, "offset_ns": 5, "world_id": "w"}]
    assert clocks.fit(proc("b", bad), REF, "w").methods == ("wall-clock",)


def test_simhost_shifts_monotonic_times_and_renames_the_host():
    sim = simhost.SimulatedHost(shift_ns=7, host="hb")
    header = {"type": schema.META_HEADER, "host": "real", "t_wall_ns": 100, "t_mono_ns": 10}
    mark = {"type": "mark", "kind": "span", "t_begin_ns": 1, "t_end_ns": 2, "iteration": 3}
    clock = {"type": "clock", "offset_ns": 50, "rtt_ns": 4, "t_mono_ns": 20}
    out = sim.meta([header, mark, clock, {"type": "sig", "id": 0}])
    assert out[0] == {"type": "header", "host": "hb", "t_wall_ns": 100, "t_mono_ns": 17}
    assert out[1] == {**mark, "t_begin_ns": 8, "t_end_ns": 9}
    assert out[2] == {**clock, "t_mono_ns": 27}
    assert header["t_mono_ns"] == 10 and header["host"] == "real"  # the recorder's own lines stay as they were
    rows = np.zeros(2, dtype=schema.OP_RECORD)
    rows["t_call"] = [100, 200]
    rows["d_end"] = [5, 6]
    shifted = sim.records(rows)
    assert shifted["t_call"].tolist() == [107, 207] and shifted["d_end"].tolist() == [5, 6]
    assert rows["t_call"].tolist() == [100, 200]


def test_simhost_unset_is_the_identity(monkeypatch):
    monkeypatch.setattr(simhost, "_current", None)
    lines, rows = [{"type": "header", "t_mono_ns": 1}], np.zeros(1, dtype=schema.OP_RECORD)
    out = simhost.apply(lines, rows)
    assert out[0] is lines and out[1] is rows
    assert simhost._from_env({}) is None
    assert simhost._from_env({simhost.SHIFT_ENV: "-5"}) == simhost.SimulatedHost(-5, None)


def _p(rank, host, method, **clock):
    return {"rank": rank, "host": host, "clock": {"measurements": 0, "rtt_ns": None, "residual_ns": None,
                                                  "drift_ppm": None, "span_ns": 0, "methods": [method], **clock}}


def test_clock_summary_per_host_and_banner_rows():
    procs = [_p(2, "b", method="gloo-pingpong", uncertainty_ns=40_000, rtt_ns=70_000, residual_ns=5_000,
                measurements=2, drift_ppm=1.5, span_ns=10 * S, beyond_ns=2 * S),
             _p(0, "a", method="reference", uncertainty_ns=0),
             _p(1, "a", method="same-host", uncertainty_ns=0),
             _p(3, "b", method="gloo-pingpong", uncertainty_ns=60_000, rtt_ns=90_000, residual_ns=15_000,
                measurements=2, drift_ppm=-3.0, span_ns=9 * S),
             _p(4, "c", method="wall-clock", uncertainty_ns=None),
             {"rank": None, "host": "a", "clock": {"methods": ["unaligned"]}}]
    a, b, c = clock_summary(procs)
    assert (a["host"], a["ranks"], a["methods"], a["uncertainty_ns"]) == ("a", [0, 1], [["reference"], ["same-host"]], 0)
    assert (b["host"], b["ranks"], b["uncertainty_ns"], b["rtt_ns"], b["residual_ns"]) == ("b", [2, 3], 60_000, 70_000, 15_000)
    assert (b["measurements"], b["drift_ppm"], b["span_ns"], b["beyond_ns"]) == (4, -3.0, 9 * S, 2 * S)
    assert (c["host"], c["uncertainty_ns"]) == ("c", None)
    assert clock_rows([a, b, c]) == [
        ("clocks", "a: reference (rank 0), rank 0's clock (same host)"),
        ("", "b: gloo ping-pong, within ±60.0 us (4 measurements, best round trip 70.0 us; "
             "runs 2.000 s past the last one)"),
        ("", "c: wall clock (NTP; error unknown)"),
    ]
    assert clock_rows([a]) == []  # one host: nothing to align


def test_banner_groups_many_hosts_by_method():
    procs = [_p(0, "h0", method="reference", uncertainty_ns=0)]
    procs += [_p(i, f"h{i}", method="gloo-pingpong", uncertainty_ns=1_000 * i, rtt_ns=1_000, measurements=2)
              for i in range(1, 6)]
    assert clock_rows(clock_summary(procs)) == [
        ("clocks", "1 host reference (rank 0); 5 hosts gloo ping-pong (worst ±5.0 us, h5)")]
