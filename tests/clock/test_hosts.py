"""Rank 1 on a simulated second host whose clock is shifted by a known amount:
the reader must recover the shift within the measured bound and put every
collective in a causally possible order, under mpirun, torchrun and mp.spawn."""
from __future__ import annotations

import glob
import json
import os

import numpy as np

from commtrace.trace import clocks, reader

from clock_hosts import HOST_B


def _processes(run_dir):
    issues: list = []
    procs = [reader.read_process(m, issues) for m in sorted(glob.glob(os.path.join(run_dir, "*.meta.jsonl")))]
    return [p for p in procs if p is not None and p.rank is not None]


def _rank(procs, rank):
    [pt] = [p for p in procs if p.rank == rank]
    return pt


def test_shift_recovered_within_the_measured_bound(hosts_run):
    procs = _processes(hosts_run.run_dir)
    r0, r1 = _rank(procs, 0), _rank(procs, 1)
    assert r1.header["host"] == HOST_B and r0.header["host"] != HOST_B
    world = r1.worlds[0]["world_id"]
    fit = clocks.fit(r1, r0, world)
    assert "gloo-pingpong" in fit.methods
    assert fit.measurements >= 2  # at world creation and at exit
    # Every op of rank 1 lies within the measured range, where the bound holds.
    t = r1.records["t_call"]
    assert len(t) and fit._t0 <= t.min() and t.max() <= fit._t1
    # The true offset is exactly -shift (one machine, one CLOCK_MONOTONIC).
    err = fit.offset(t) + hosts_run.shift_ns
    assert np.abs(err).max() <= fit.uncertainty_ns, (np.abs(err).max(), fit.describe())
    # Each measurement alone is within half its round trip (+1 ns of integer rounding).
    for line in clocks.usable_lines(r1, r0, world):
        assert abs(line["offset_ns"] + hosts_run.shift_ns) <= line["rtt_ns"] // 2 + 1, line


def test_collectives_in_causal_order(hosts_run):
    """No rank can finish a collective before every rank has started it: on the
    aligned clock each instance's latest start is before its earliest end, give
    or take the measured bound."""
    run = reader.load_run(hosts_run.run_dir)
    bound = max(p["clock"]["uncertainty_ns"] for p in run.processes)
    df = run.frame
    coll = df[df["op"].isin(["all_reduce", "barrier"])]
    per = coll.groupby(["group", "seq"], observed=True).agg(
        ranks=("rank", "nunique"), last_start=("t_start_ns", "max"), first_end=("t_end_ns", "min"))
    assert len(per) >= 12 and (per["ranks"] == 2).all()
    late = per["last_start"].astype("int64") - per["first_end"].astype("int64")
    assert (late <= bound).all(), late.max()
    # Each rank's ops keep their own order after the shift is taken out.
    for _, rdf in df.groupby("rank"):
        assert (np.diff(rdf.sort_values("seq")["t_start_ns"].astype("int64").to_numpy()) > 0).all()


def test_report_states_method_and_uncertainty(hosts_run):
    from commtrace.analysis.partitioned import analyse
    info = analyse(hosts_run.run_dir, workers=1, progress=False).info
    by_host = {c["host"]: c for c in info["clocks"]}
    assert info["clocks"][0]["methods"] == [["reference"]] and info["clocks"][0]["uncertainty_ns"] == 0
    b = by_host[HOST_B]
    assert b["ranks"] == [1] and "gloo-pingpong" in b["methods"][0]
    assert 0 < b["uncertainty_ns"] and b["rtt_ns"] <= 2 * b["uncertainty_ns"]


def test_users_groups_untouched(hosts_run):
    """torch's bookkeeping after init_process_group is what an untraced run has:
    one group named "0" (the clock group is commtrace's own, never registered)."""
    for rank in (0, 1):
        with open(f"{hosts_run.probe}.rank{rank}") as f:
            state = json.load(f)
        assert state == {"group_count": 1, "pg_names": ["0"], "groups": 1, "world_size": 2,
                         "backend": "gloo", "default_pg_in_map": True}
