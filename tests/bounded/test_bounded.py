"""Bounded, always-on mode (``commtrace run --keep-last N`` / ``--steps A:B``) under
mp.spawn, mpirun and torchrun: the files stay bounded, keep what they promise,
and report/check say which part of the run they cover. Real processes, real gloo.

train.py: 30 steps of a 2-bucket DDP model plus one all_reduce per step; per rank
95 collectives on the default group (DDP construction 4, step 1 one gradient
all_reduce, from step 2 on two buckets, bucket rebuild 2 broadcasts, 30 all_reduces,
a barrier).
"""
from __future__ import annotations

import glob
import json
import os
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

from commtrace.trace import schema  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train.py")
STEPS = 30
OPS_PER_RANK = 95
# Each launch runs on both wrappers: they learn of async ops' ends differently (the
# Python one by polling small ops), and the ring must keep the same ops either way.
WRAPPERS = ("native", "python")


def _check_wrapper(run_dir, wrapper: str) -> None:
    assert h.group_wrappers(run_dir) == {wrapper}


def _load(run_dir, table="ops"):
    import commtrace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return commtrace.load(str(run_dir), table=table)


def _records_on_disk(run_dir, suffix: str) -> dict:
    """rank file stem -> records per segment file."""
    out = {}
    for path in glob.glob(os.path.join(str(run_dir), "rank*" + suffix + "*")):
        out[os.path.basename(path)] = os.path.getsize(path) // 32
    return out


def _cli(*args) -> h.Result:
    return h.commtrace_main(*args)


def _same_check_partitioned(run_dir, rc: int) -> None:
    """check --partitioned (seq chunk by seq chunk) prints the findings of check in one chunk."""
    one = json.loads(_cli("check", str(run_dir), "--json").check(rc).stdout)
    part = json.loads(_cli("check", str(run_dir), "--json", "--partitioned").check(rc).stdout)
    assert part == one


@pytest.fixture(scope="module", params=WRAPPERS)
def ring(bounded_ring, request):
    """mp.spawn, --keep-last 40 (tests/conftest.py: tests/report/test_partial_report.py reads it too)."""
    d = bounded_ring(request.param)
    _check_wrapper(d, request.param)
    return d


@pytest.fixture(scope="module", params=WRAPPERS)
def window(tmp_path_factory, request):
    """mpirun, --steps 10:12."""
    d = tmp_path_factory.mktemp("window") / "run"
    h.run(h.mpirun_cmd(2, *h.commtrace_cmd(d, "--steps", "10:12", TRAIN, STEPS)),
          env=h.wrapper_env(request.param, **h.MPI_ENV, MASTER_PORT=h.free_port())).check()
    _check_wrapper(d, request.param)
    return d


def test_ring_files_stay_bounded(ring):
    for suffix in (schema.OPS_SUFFIX, schema.SPANS_SUFFIX):
        on_disk = _records_on_disk(ring, suffix)
        assert len(on_disk) == 4, on_disk          # two ranks, two segments each (the ring went round)
        assert all(n <= 40 for n in on_disk.values()), on_disk
    for rank in (0, 1):
        [cov] = glob.glob(os.path.join(str(ring), f"rank{rank}.pid*{schema.COVERAGE_SUFFIX}"))
        assert os.path.getsize(cov) < 4096


def test_ring_keeps_exactly_the_last_ops(ring):
    df = _load(ring)
    procs = {p["rank"]: p for p in df.attrs["processes"]}
    for rank in (0, 1):
        mine = df[df["rank"] == rank]
        assert len(mine) == 40
        assert sorted(mine["seq"]) == list(range(OPS_PER_RANK - 39, OPS_PER_RANK + 1))
        cov = procs[rank]["coverage"]
        assert (cov["keep_last"], cov["ops_seen"], cov["ops_written"], cov["ops_kept"], cov["ops_dropped"]) == \
            (40, OPS_PER_RANK, OPS_PER_RANK, 40, OPS_PER_RANK - 40)
        assert cov["first_kept_t_mono_ns"] is not None and cov["steps_done"] == STEPS
        assert procs[rank]["end"]["how"] == "exit" and procs[rank]["complete"]
    spans = _load(ring, table="spans")
    # Spans that began before the first kept op are left out: their steps' ops are gone.
    first = df.groupby("rank")["t_start_ns"].min()
    for rank in (0, 1):
        assert (spans[spans["rank"] == rank]["t_begin_ns"] >= first[rank]).all()
    assert spans["step"].max() == STEPS


def test_report_and_check_say_what_a_ring_covers(ring):
    rep = _cli("report", str(ring), "--width", "200").check()
    line = next(x for x in rep.stdout.splitlines() if x.strip().startswith("coverage"))
    assert "last 40 ops per process kept: 80 of 190 finished ops (110 overwritten)" in line
    chk = _cli("check", str(ring)).check(0)
    assert "no problems found" in chk.stdout
    assert "info  bounded trace: last 40 ops per process kept" in chk.stdout
    _same_check_partitioned(ring, 0)
    data = json.loads(_cli("report", str(ring), "--json", "-").check().stdout)
    assert [s["step"] for s in data["steps"]][-1] == STEPS       # the kept steps keep their numbers
    assert all(0 < v <= 1 for v in data["run"]["comm_share_per_rank"].values())


# Per rank, every collective of train.py by op; in steps 10:12, 9 all_reduces.
OPS_BY_NAME = {"all_gather": 1, "all_reduce": 89, "barrier": 1, "broadcast": 4}


def _outside_window(df, rank: int):
    """The ops of ``rank`` written outside the window. An op still running
    ``IN_FLIGHT_AFTER_NS`` after its call is written in full wherever it is (hang
    evidence for ``check``): on a loaded machine a DDP all_reduce can wait that
    long for its peer. Only such ops may appear outside the window."""
    from commtrace.capture.recorder import IN_FLIGHT_AFTER_NS
    mine = df[df["rank"] == rank]
    long = mine[mine["duration_ns"].fillna(IN_FLIGHT_AFTER_NS) >= IN_FLIGHT_AFTER_NS]
    return mine, long


def test_steps_window_writes_only_those_steps(window):
    df = _load(window)
    spans = _load(window, table="spans")
    assert set(spans["step"]) == {10, 11, 12}
    assert set(spans.groupby("rank").size()) == {9}           # forward, backward, optimizer x 3 steps
    procs = {p["rank"]: p for p in df.attrs["processes"]}
    counts = _load(window, table="counts")
    assert (counts["time_ns"] > 0).all() and (counts["time_unknown"] == 0).all()
    assert counts[counts["op"] == "barrier"]["bytes"].eq(0).all()
    assert set(counts["group"]) == {"0"}
    per = counts.groupby(["rank", "op"])["ops"].sum().unstack(fill_value=0)
    for rank in (0, 1):
        mine, long = _outside_window(df, rank)
        # Each step: two DDP buckets and the plain all_reduce that follows the previous
        # step's optimizer step; beyond those 9, only ops that ran past the in-flight limit.
        assert 9 <= len(mine) <= 9 + len(long), mine
        if len(mine) == 9:
            assert set(mine["op"]) == {"all_reduce"}
        steps = procs[rank]["coverage"]
        assert (steps["steps"], steps["ops_seen"], steps["ops_written"], steps["steps_done"]) == \
            ("10:12", OPS_PER_RANK, len(mine), STEPS)
        assert steps["ops_counted"] == OPS_PER_RANK - len(mine)
        # every op is either written or counted, by op
        written = mine.groupby("op", observed=True).size()
        assert {op: int(per.loc[rank].get(op, 0)) + int(written.get(op, 0)) for op in OPS_BY_NAME} == OPS_BY_NAME


def test_report_and_check_say_what_a_window_covers(window):
    rep = _cli("report", str(window), "--width", "200").check()
    written = len(_load(window))
    assert f"steps 10:12 in full (of 30 taken); {2 * OPS_PER_RANK - written} ops outside only counted" in rep.stdout
    chk = _cli("check", str(window)).check(0)
    assert "no problems found" in chk.stdout and "bounded trace: steps 10:12" in chk.stdout
    _same_check_partitioned(window, 0)
    # The step table keeps capture's step numbers; --steps selects by them; the comm
    # share is over the time the records cover.
    data = json.loads(_cli("report", str(window), "--json", "-").check().stdout)
    assert [s["step"] for s in data["steps"]] == [10, 11, 12]
    assert data["run"]["coverage"].startswith("steps 10:12 in full")
    assert all(0 < v <= 1 for v in data["run"]["comm_share_per_rank"].values())
    data = json.loads(_cli("report", str(window), "--steps", "11", "--json", "-").check().stdout)
    assert [s["step"] for s in data["steps"]] == [11]


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_torchrun_ring_and_every_k(tmp_path, wrapper):
    """Both options together under torchrun: steps 10, 20, 30 written in full, of
    which the ring keeps the last 6 ops (steps 20 and 30)."""
    d = tmp_path / "run"
    h.run([h.TORCHRUN, "--nproc_per_node", "2", "--master-port", str(h.free_port()), "-m", "commtrace", "run",
           "-o", str(d), "--keep-last", "6", "--steps", "every:10", TRAIN, STEPS], env=h.wrapper_env(wrapper)).check()
    _check_wrapper(d, wrapper)
    df = _load(d)
    for p in df.attrs["processes"]:
        assert p["launcher"] == "torchrun"
        assert (p["coverage"]["keep_last"], p["coverage"]["steps"], p["coverage"]["ops_kept"]) == (6, "every:10", 6)
        # 9 ops in steps 10, 20, 30, and any op elsewhere that ran past the in-flight
        # limit (see _outside_window); every op is written or counted
        cov = p["coverage"]
        assert cov["ops_written"] >= 9 and cov["ops_written"] + cov["ops_counted"] == OPS_PER_RANK
    assert df.groupby("rank").size().to_dict() == {0: 6, 1: 6}
    assert set(_load(d, table="spans")["step"]) == {20, 30}


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_hang_in_ring_mode_is_diagnosed_as_without_it(tmp_path, wrapper):
    """Rank 1 skips one all_reduce; rank 0 hangs in its 6th. With only 3 ops kept
    per process, the watchdog still dumps and check still names the collective
    rank 1 never arrived at -- and nothing the ring dropped is taken for a missing rank."""
    d = tmp_path / "run"
    r = h.run(h.commtrace_cmd(d, "--keep-last", "3", "--hang-timeout", "2", "--abort-on-hang",
                              os.path.join(h.REPO, "tests", "faults", "scripts", "spawn_faults.py"), "skip"),
              env=h.wrapper_env(wrapper, MASTER_PORT=h.free_port()), timeout=90)
    assert not r.timed_out and r.returncode != 0
    _check_wrapper(d, wrapper)
    assert glob.glob(os.path.join(str(d), "hang.rank0.pid*.json"))
    chk = _cli("check", str(d), "--json").check(1)
    import json
    findings = json.loads(chk.stdout)["findings"]
    arrived = [f for f in findings if f["kind"] == "not_arrived"]
    assert [(f["seq"], f["ranks"]) for f in arrived] == [(6, [1])]
    _same_check_partitioned(d, 1)
    cov = next(f for f in findings if f["kind"] == "coverage")
    assert cov["severity"] == "info" and {p["keep_last"] for p in cov["data"]["processes"]} == {3}
    df = _load(d)
    assert df.groupby("rank").size().to_dict() == {0: 3, 1: 3}
    assert np.array_equal(np.sort(df[df["rank"] == 0]["seq"].to_numpy()), [4, 5, 6])
