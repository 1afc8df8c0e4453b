"""The Perfetto / Chrome trace-event JSON, checked structurally."""
import json
from collections import defaultdict


import commtrace
from commtrace.render.perfetto import assign_lanes
from commtrace.trace.synthetic import write_synthetic_run

from .conftest import cli


def load_trace(run, tmp_path):
    out = tmp_path / "trace.json"
    assert cli("report", run, "--perfetto", out, "-q") == 0
    return json.loads(out.read_text()), commtrace.load(run)


def check_structure(trace, df):
    ev = trace["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
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
