"""The Perfetto / Chrome trace-event JSON, checked structurally."""
import json
import os
from collections import defaultdict


import commtrace
from commtrace.render.perfetto import assign_lanes
from synthetic import write_synthetic_run

from .conftest import cli


def load_trace(run, tmp_path):
    out = tmp_path / "trace.json"
    assert cli("report", run, "--perfetto", out, "-q") == 0
    return json.loads(out.read_text()), commtrace.load(run)


def check_structure(trace, df):
    ev = trace["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X" and e["cat"] in ("collective", "p2p")]
    assert len(xs) == len(df)
    # One process per rank, named.
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {r: f"rank {r}" for r in sorted(df["rank"].unique())}
    per_rank = defaultdict(int)
    for e in xs:
        per_rank[e["pid"]] += 1
        assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["dur"] >= 0
        for field in ("op", "seq", "group", "shapes", "bytes", "t_start_ns", "status", "iteration", "host"):
            assert field in e["args"]
    assert dict(per_rank) == df.groupby("rank").size().to_dict()
    # Per track: timestamps monotone in file order and no overlap (so no mis-nesting).
    tracks = defaultdict(list)
    for e in xs:
        tracks[(e["pid"], e["tid"])].append(e)
    for evs in tracks.values():
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts)
        for a, b in zip(evs, evs[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6
    # Flows: ids unique, each "s" has one "f" (bp "e"), both inside a slice on their track.
    s = {e["id"]: e for e in ev if e["ph"] == "s"}
    f = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert len(s) == len([e for e in ev if e["ph"] == "s"])
    assert set(s) == set(f) and len(s) > 0
    assert all(e["bp"] == "e" for e in f.values())
    for fe in list(s.values()) + list(f.values()):
        assert any(x["ts"] <= fe["ts"] <= x["ts"] + x["dur"] for x in tracks[(fe["pid"], fe["tid"])])
    return xs, s


def test_perfetto_real_run(real_run, tmp_path):
    trace, df = load_trace(real_run, tmp_path)
    xs, flows = check_structure(trace, df)
    # Collectives: one flow per instance for 2 ranks.
    assert len(flows) == len(df) // 2
    # Async all_reduce / broadcast overlap in DDP: the first track carries the rank's first op.
    assert min(e["ts"] for e in xs) == 0.0


def test_perfetto_synthetic_overlapping_async(tmp_path):
    run = write_synthetic_run(str(tmp_path / "r"), ranks=3, ops_per_rank=80, seed=3)
    trace, df = load_trace(run, tmp_path)
    xs, flows = check_structure(trace, df)
    assert len({e["tid"] for e in xs}) > 1  # overlapping bucket all_reduces need extra tracks
    assert len(flows) == (len(df) // 3) * 2  # chain of 3 ranks: 2 flows per collective


def test_assign_lanes_greedy():
    import numpy as np
    s, e = np.array([0, 1, 4, 10]), np.array([5, 3, 9, 11])
    assert assign_lanes(np.zeros(4, int), s, e, small=0).tolist() == [0, 1, 1, 0]   # greedy packing
    assert assign_lanes(np.zeros(4, int), s, e).tolist() == [0, 1, 2, 0]            # small cluster: k-th op, track k
    assert assign_lanes(np.array([0, 1, 0, 1]), s, e).tolist() == [0, 0, 1, 0]


def test_perfetto_escapes_strings(tmp_path):
    from .test_bad_input import write_hostile_run
    run = write_hostile_run(tmp_path / "h")
    out = tmp_path / "t.json"
    assert cli("report", run, "--perfetto", out, "-q") == 0
    trace = json.loads(out.read_text())   # still valid JSON
    threads = {e["args"]["thread"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert any('"' in t and "\n" in t for t in threads)


def test_perfetto_compute_spans_and_marks(tmp_path):
    """Compute spans on a "compute" track beside each rank's ops; marks as instant events;
    regions on a "regions" track; a window applies to all of them."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tracebuilder import Proc, write_run
    p = Proc(0, world_size=1)
    p.span("forward", 0, 10, 1, module="Net").span("backward", 10, 30, 1, module="Net")
    p.op("all_reduce", 12, 28, ret=13, phase="backward", module="Net", nbytes=400)
    p.span("optimizer", 30, 35, 1, module="SGD").mark('epoch "1"', 36).region("eval", 40, 50)
    p.op("all_reduce", 42, 45, is_async=False)
    p.span("forward", 60, 70, 2, module="Net").span("backward", 70, 80, 2).span("optimizer", 80, 85, 2)
    run = write_run(tmp_path / "r", [p])
    out = tmp_path / "t.json"
    assert cli("report", run, "--perfetto", out, "-q") == 0
    ev = json.loads(out.read_text())["traceEvents"]
    compute = [e for e in ev if e.get("cat") == "compute"]
    assert [(e["name"], e["ts"], e["dur"]) for e in compute] == [
        ("forward", 0.0, 10.0), ("backward", 10.0, 20.0), ("optimizer", 30.0, 5.0),
        ("forward", 60.0, 10.0), ("backward", 70.0, 10.0), ("optimizer", 80.0, 5.0)]
    ops_tids = {e["tid"] for e in ev if e.get("cat") == "collective"}
    assert len({e["tid"] for e in compute}) == 1 and not ({e["tid"] for e in compute} & ops_tids)
    assert [(e["name"], e["ts"], e["s"]) for e in ev if e["ph"] == "i"] == [('epoch "1"', 36.0, "p")]
    assert [(e["name"], e["ts"], e["dur"]) for e in ev if e.get("cat") == "region"] == [("eval", 40.0, 10.0)]
    # --steps 2 keeps step 2's spans and nothing of step 1
    assert cli("report", run, "--perfetto", out, "-q", "--steps", "2") == 0
    ev = json.loads(out.read_text())["traceEvents"]
    assert [e["args"]["step"] for e in ev if e.get("cat") == "compute"] == [2, 2, 2]
    assert not [e for e in ev if e["ph"] == "i"] and not [e for e in ev if e.get("cat") == "collective"]
