"""commtrace.start() / stop() and COMMTRACE=1: tracing jobs not launched through
``commtrace run``. Real processes, real gloo; see worker.py for what each rank does."""
from __future__ import annotations

import glob
import json
import os
import site
import sys
import warnings

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
TRAIN = os.path.join(h.REPO, "tests", "bounded", "train.py")
PTH = "commtrace-autostart.pth"


def _load(run_dir, table="ops"):
    import commtrace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return commtrace.load(str(run_dir), table=table)


def _launch(tmp_path_factory, mode: str, **env) -> tuple:
    base = tmp_path_factory.mktemp(f"api-{mode}")
    run_dir, out = base / "run", base / "out"
    h.run([h.PY, WORKER, mode, 2, h.free_port(), run_dir, out], env=h.clean_env(**env)).check()
    seen = {}
    for rank in (0, 1):
        with open(f"{out}.rank{rank}") as f:
            seen[rank] = json.load(f)
    return run_dir, seen


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    return _launch(tmp_path_factory, "before")


@pytest.fixture(scope="module")
def after(tmp_path_factory):
    return _launch(tmp_path_factory, "after")


def test_start_before_init_traces_everything_and_closes_at_exit(before):
    run_dir, seen = before
    assert seen[0]["run_dir"] == str(run_dir) and seen[0]["default_type"] in ("TracedPG", "TracedProcessGroup")
    df = _load(run_dir)
    assert df.attrs["incomplete"] == []
    for rank in (0, 1):
        mine = df[df["rank"] == rank]
        # DDP construction (4), step 1 (1 bucket), steps 2-3 (2 rebuild broadcasts + 1 bucket each), barrier.
        assert list(mine["op"].astype(str)) == ["all_gather", "broadcast", "broadcast", "all_reduce", "broadcast",
                                                "broadcast", "all_reduce", "all_reduce", "barrier"]
        assert list(mine["seq"]) == list(range(1, 10))
    procs = df.attrs["processes"]
    assert {p["end"]["how"] for p in procs} == {"exit"}          # never stopped: closed at exit
    assert set(_load(run_dir, table="spans")["step"]) == {1, 2, 3}


def test_start_after_init_traces_existing_groups_from_then_on(after):
    run_dir, seen = after
    for rank in (0, 1):
        s = seen[rank]
        assert s["types_before"] == ["ProcessGroup", "ProcessGroup"]
        assert set(s["types_after"]) <= {"TracedPG", "TracedProcessGroup"}   # swapped into torch's registries
        assert s["backend"] == "gloo"
        assert (s["untraced_before"], s["sub_sum"], s["untraced_after"], s["after_restart"]) == (4.0, 2.0, 4.0, 4.0)
    df = _load(run_dir)
    assert df.attrs["incomplete"] == []
    first = df[~df["file"].astype(str).str.contains(r"\.s2$")]
    # Nothing from before start(): seq 1 is the DDP construction that followed it.
    for rank in (0, 1):
        mine = first[(first["rank"] == rank) & (first["group"] == "0")]
        assert list(mine["seq"]) == list(range(1, 9)) and str(mine["op"].iloc[0]) == "all_gather"
        sub = first[(first["rank"] == rank) & (first["group"] != "0")]
        assert len(sub) == 1 and str(sub["op"].iloc[0]) == "all_reduce"   # the subgroup made before start()


def test_stop_closes_and_restart_writes_a_new_file(after):
    run_dir, seen = after
    assert seen[0]["stopped"] == str(run_dir) and seen[0]["stop_again"] is None
    assert seen[0]["restart"] == str(run_dir) and "already tracing" in seen[0]["twice"]
    df = _load(run_dir)
    procs = {p["file"]: p for p in df.attrs["processes"]}
    for rank in (0, 1):
        [first] = [f for f in procs if f.startswith(f"rank{rank}.") and ".s2." not in f]
        [second] = [f for f in procs if f.startswith(f"rank{rank}.") and ".s2." in f]
        assert procs[first]["end"]["how"] == "stop" and procs[first]["end"]["exit_code"] is None
        assert procs[second]["end"]["how"] == "exit"           # restarted, never stopped: closed at exit
        mine = df[df["file"] == second[: -len(".meta.jsonl")]]
        # The 2 untraced all_reduces after stop() are not there; seq numbering goes on.
        assert list(mine["op"].astype(str)) == ["all_reduce", "all_reduce", "barrier"]
        assert list(mine["seq"]) == [9, 10, 11]
    chk = h.commtrace_main("check", run_dir).check(0)
    assert "no problems found" in chk.stdout


@pytest.mark.parametrize("wrapper", ["native", "python"])
def test_ops_running_at_stop_stay_in_their_session(tmp_path_factory, wrapper):
    # Rank 0 stops and restarts while an async all_reduce and a blocking one (on a thread)
    # wait for rank 1, which joins them only after the restart: they end in session 2.
    if wrapper == "native":
        h.ensure_native_wrapper()
    run_dir, seen = _launch(tmp_path_factory, "pending", **({} if wrapper == "native" else {"COMMTRACE_NATIVE": "0"}))
    assert seen[0]["sums"] == [2.0, 2.0, 2.0]
    assert h.group_wrappers(run_dir) == {wrapper}
    df = _load(run_dir)
    mine = df[df["rank"] == 0]
    restarted = mine["file"].astype(str).str.contains(r"\.s2$")
    first, second = mine[~restarted], mine[restarted]
    # Written running when session 1 closed; nothing of them in session 2, whose seqs go on.
    assert sorted(zip(first["group"].astype(str), first["seq"], first["status"].astype(str))) == \
        [("0", 1, "in_flight"), ("1", 1, "in_flight")]
    assert list(zip(second["group"].astype(str), second["seq"], second["op"].astype(str))) == \
        [("0", 2, "all_reduce"), ("0", 3, "barrier")]


def test_context_manager_with_keep_last_on_the_python_wrapper(tmp_path_factory):
    run_dir, seen = _launch(tmp_path_factory, "with", COMMTRACE_NATIVE="0")
    assert seen[0]["run_dir"] == str(run_dir) and seen[0]["in"] == 64.0 and seen[0]["out"] == 4.0
    # Inside: the run's variables for Python children; after: as before.
    assert seen[0]["env_inside"]["COMMTRACE_DIR"] == str(run_dir) and seen[0]["env_inside"]["COMMTRACE_KEEP_LAST"] == "4"
    assert seen[0]["env_inside"]["PYTHONPATH"].split(os.pathsep)[0].endswith("_boot")
    assert seen[0]["env_after"] == seen[0]["env_before"]
    df = _load(run_dir)
    assert h.group_wrappers(run_dir) == {"python"}
    for p in df.attrs["processes"]:
        assert p["end"]["how"] == "stop"
        assert (p["coverage"]["ops_seen"], p["coverage"]["ops_kept"]) == (6, 4)
    assert df.groupby("rank")["seq"].apply(list).to_dict() == {0: [3, 4, 5, 6], 1: [3, 4, 5, 6]}


def test_hang_watchdog_runs_again_after_a_restart(tmp_path_factory):
    run_dir, seen = _launch(tmp_path_factory, "hang")
    assert seen[0]["late"] == 2.0
    [dump] = glob.glob(os.path.join(str(run_dir), "hang.rank0.pid*.json"))
    with open(dump) as f:
        doc = json.load(f)
    assert [(o["op"], o["seq"]) for o in doc["in_flight"]] == [("all_reduce", 2)]
    from commtrace.trace.reader import load_run
    [second] = [p for p in load_run(str(run_dir)).processes if p["rank"] == 0 and ".s2." in p["file"]]
    assert [d["reason"] for d in second["dumps"]] == ["hang"]     # dumped during the second session


# -- COMMTRACE=1 ----------------------------------------------------------------------

def _autostart_installed() -> None:
    if not any(os.path.exists(os.path.join(d, PTH)) for d in site.getsitepackages()):
        pytest.fail(f"{PTH} is not installed in this environment (make setup installs it)")


def _only_run(cwd) -> str:
    [run] = [d for d in glob.glob(os.path.join(str(cwd), "commtrace-out", "*")) if os.path.isdir(d)]
    return run


def test_commtrace_1_under_torchrun_traces_every_rank(tmp_path):
    _autostart_installed()
    r = h.run([h.TORCHRUN, "--nproc_per_node", "2", "--master-port", str(h.free_port()), TRAIN, 3],
              env=h.clean_env(COMMTRACE="1"), cwd=str(tmp_path)).check()
    run = _only_run(tmp_path)
    assert "commtrace: trace written to commtrace-out/" in r.stderr
    df = _load(run)
    assert sorted(p["rank"] for p in df.attrs["processes"]) == [0, 1]
    assert {p["launcher"] for p in df.attrs["processes"]} == {"torchrun"}
    assert df.groupby("rank").size().to_dict() == {0: 14, 1: 14}


def test_commtrace_1_under_mpirun_ranks_agree_on_the_run(tmp_path):
    _autostart_installed()
    port = h.free_port()
    h.run(h.mpirun_cmd(2, "-x", "COMMTRACE=1", "-x", "COMMTRACE_KEEP_LAST=5", "-x", "MASTER_ADDR=127.0.0.1",
                       "-x", f"MASTER_PORT={port}", h.PY, TRAIN, 3), env=h.mpi_env(MASTER_PORT=port), cwd=str(tmp_path)).check()
    df = _load(_only_run(tmp_path))
    assert sorted(p["rank"] for p in df.attrs["processes"]) == [0, 1]
    assert {p["launcher"] for p in df.attrs["processes"]} == {"openmpi"}
    assert df.groupby("rank").size().to_dict() == {0: 5, 1: 5}


def test_commtrace_1_traces_mp_spawn_children(tmp_path):
    _autostart_installed()
    h.run([h.PY, TRAIN, 3, "spawn", 2, h.free_port()], env=h.clean_env(COMMTRACE="1", COMMTRACE_STEPS="2"),
          cwd=str(tmp_path)).check()
    df = _load(_only_run(tmp_path))
    assert sorted(p["rank"] for p in df.attrs["processes"]) == [0, 1]
    assert set(_load(_only_run(tmp_path), table="spans")["step"]) == {2}


def test_commtrace_unset_or_bad_never_touches_the_program(tmp_path):
    _autostart_installed()
    probe = "import sys; print(sorted(m for m in sys.modules if m.startswith('commtrace')))"
    r = h.run([h.PY, "-c", probe], cwd=str(tmp_path)).check()
    assert r.stdout.strip() == "[]"
    r = h.run([h.PY, "-c", probe], env=h.clean_env(COMMTRACE="0"), cwd=str(tmp_path)).check()
    assert r.stdout.strip() == "[]"
    # A bad option: one line, and the program runs (untraced).
    r = h.run([h.PY, "-c", "print(6 * 7)"], env=h.clean_env(COMMTRACE="1", COMMTRACE_STEPS="10-20"),
              cwd=str(tmp_path)).check()
    assert r.stdout.strip() == "42"
    assert r.stderr.count("\n") == 1 and "COMMTRACE_STEPS" in r.stderr and "tracing did not start" in r.stderr
    # The commtrace command itself is never traced.
    h.run([h.PY, "-m", "commtrace", "--version"], env=h.clean_env(COMMTRACE="1"), cwd=str(tmp_path)).check()
    # A tool importing the module by name, COMMTRACE unset, starts nothing.
    r = h.run([h.PY, "-c", "import commtrace.capture.autostart"], cwd=str(tmp_path)).check()
    assert r.stderr == ""
    assert not os.path.exists(os.path.join(str(tmp_path), "commtrace-out"))
