"""Python children of a traced run (fork, subprocess), successive worlds, torchrun."""
from __future__ import annotations

import glob
import os
import re
import signal

import pytest

import helpers as h
from helpers import worker


def test_children_and_successive_worlds(tmp_path):
    run_dir = tmp_path / "run"
    ports = [h.free_port() for _ in range(4)]
    res = h.run(h.commtrace_cmd(run_dir, worker("children.py"), *ports), timeout=120)
    res.check(0)
    metas = sorted(os.path.basename(p) for p in glob.glob(str(run_dir / "*.meta.jsonl")))
    # 2 forked ranks + 2 subprocess ranks + this process (two worlds, one file)
    assert len(metas) == 5, metas
    keys = [re.fullmatch(r"rank(\d+)\.pid(\d+)\.meta\.jsonl", m) for m in metas]
    assert all(keys), metas
    assert sorted(int(k.group(1)) for k in keys) == [0, 0, 0, 1, 1]
    assert len({k.group(2) for k in keys}) == 5  # one pid each
    df = h.load(run_dir)
    assert not df.attrs["incomplete"], df.attrs["incomplete"]
    by_bytes = {b: d for b, d in df.groupby("bytes")}
    assert sorted(by_bytes) == [12, 20, 28, 36]
    fork_w, sub_w = by_bytes[12], by_bytes[20]
    for d in (fork_w, sub_w):
        assert sorted(d["rank"]) == [0, 1] and d["pid"].nunique() == 2 and d["world"].nunique() == 1
        assert set(d["group_size"]) == {2} and set(d["status"]) == {"completed"}
    parent = df[df["bytes"].isin([28, 36])]
    assert parent["pid"].nunique() == 1
    assert parent["world"].nunique() == 2  # two successive worlds kept apart
    assert set(parent["seq"]) == {1}  # each world numbers its ops from the start
    assert df["world"].nunique() == 4
    assert len({*fork_w["pid"], *sub_w["pid"], *parent["pid"]}) == 5
    # Every process reports the command that was traced; its own argv says what it ran.
    procs = df.attrs["processes"]
    assert {tuple(p["command"]) for p in procs} == {(worker("children.py"), *map(str, ports))}
    assert sum(os.path.basename(p["argv"][0]) == "child_sub.py" for p in procs) == 2
    # Rank 0 lives in three processes of three worlds: a rank is a rank of its world (the
    # parent's second world stays its first one's), its wall time the union of its processes'
    # lives, so every share stays <= 1.
    from commtrace.analysis.partitioned import analyse
    from commtrace.trace.rank_ranges import WORLD_STRIDE
    info = analyse(str(run_dir), workers=1, progress=False).info
    assert 0 < info["comm_share"]["max"] <= 1.0, info["comm_share"]
    from commtrace.analysis import intervals
    assert len(info["worlds"]) == 3 and len(info["comm_ns_per_rank"]) == 5   # 2 + 2 ranks + the parent
    for key, comm in info["comm_ns_per_rank"].items():
        world_id, rank = info["worlds"][key // WORLD_STRIDE], key % WORLD_STRIDE
        lives = [(p["t_mono_ns"], p["end"]["t_mono_ns"]) for p in procs
                 if p["rank"] == rank and (p.get("worlds") or [None])[0] == world_id]
        assert len(lives) == 1, (key, lives)
        wall = intervals.length(intervals.union(*zip(*lives)))
        assert abs(comm / info["comm_share_per_rank"][key] - wall) < 1e3, key


def test_a_forked_process_is_traced_from_its_fork(tmp_path):
    """fork_start.py forks two 1-rank worlds late, one after the other (multiprocessing's fork,
    then os.fork; the second exits with code 3): each child's header start is its fork, not its
    parent's start, so the run's duration, each rank's wall time and aligned start, and the
    worlds' order (report, check) count from the forks."""
    import json

    run_dir, out = tmp_path / "run", tmp_path / "out"
    h.run(h.commtrace_cmd(run_dir, worker("fork_start.py"), out, h.free_port(), h.free_port()), timeout=120).check(0)
    kids = [json.loads(open(f"{out}.{i}").read()) for i in range(2)]
    procs = {p["pid"]: p for p in h.load(run_dir).attrs["processes"]}
    for kid in kids:
        p = procs[kid["pid"]]
        for clock, field in enumerate(("t_mono_ns", "t_wall_ns")):
            assert kid["before_fork"][clock] <= p[field] <= kid["child_first"][clock], (field, kid, p[field])
    world = [procs[k["pid"]]["worlds"][0] for k in kids]
    rep = h.commtrace_main("report", run_dir, "--json", tmp_path / "r.json", "-q")
    assert rep.returncode == 0, rep.stderr
    run = json.loads((tmp_path / "r.json").read_text())["run"]
    assert run["worlds"] == world                              # in the order they were forked
    assert run["endings"] == {"w1:r0": "exited with code 3"}
    ends = {f"w{i}:r0": procs[k["pid"]]["end"]["t_mono_ns"] for i, k in enumerate(kids)}
    # the run: the first fork to the last end (its parent never was a rank)
    assert run["wall_ns"] <= ends["w1:r0"] - kids[0]["before_fork"][0], run["wall_ns"]
    (clocks,) = run["clocks"]
    for i, kid in enumerate(kids):
        rank = f"w{i}:r0"
        wall = run["comm_ns_per_rank"][rank] / run["comm_share_per_rank"][rank]
        assert wall <= ends[rank] - kid["before_fork"][0] + 1, (rank, wall)
        start = next(c["start_aligned_ns"] for c in clocks["per_rank"] if c["rank"] == rank)
        assert kid["before_fork"][0] <= start <= kid["child_first"][0], (rank, start)
    check = h.commtrace_main("check", run_dir)
    assert "rank 0 of world w1 exited with code 3" in check.stdout, check.stdout


def test_worlds_are_numbered_in_the_order_they_were_created(tmp_path):
    """fork_world_first.py: the traced parent forks a child that makes its world (and exits with
    code 3), then makes its own: the child's world is w0, the parent's w1, though the parent's
    trace started first; the report and check number them alike."""
    import json

    from commtrace.analysis.check.fates import world_numbers

    run_dir = tmp_path / "run"
    h.run(h.commtrace_cmd(run_dir, worker("fork_world_first.py"), h.free_port(), h.free_port()), timeout=120).check(0)
    df = h.load(run_dir)
    child, parent = (df.loc[df["bytes"] == b, "world"].iloc[0] for b in (12, 20))
    starts = {p["worlds"][0]: p["t_wall_ns"] for p in df.attrs["processes"]}
    assert starts[parent] < starts[child], starts     # the parent's trace started first
    assert world_numbers(df.attrs["processes"]) == {child: 0, parent: 1}
    rep = h.commtrace_main("report", run_dir, "--json", tmp_path / "r.json", "-q")
    assert rep.returncode == 0, rep.stderr
    run = json.loads((tmp_path / "r.json").read_text())["run"]
    assert run["worlds"] == [child, parent]
    assert run["endings"] == {"w0:r0": "exited with code 3"}
    check = h.commtrace_main("check", run_dir)
    assert "rank 0 of world w0 exited with code 3" in check.stdout, check.stdout


@pytest.mark.parametrize("order", ["commtrace under torchrun", "torchrun under commtrace"])
def test_torchrun(tmp_path, order):
    """torchrun ... -m commtrace run SCRIPT, and commtrace run torchrun ... SCRIPT: a Python
    console script named on PATH runs as that script, its ranks traced as its children."""
    run_dir, out = tmp_path / "run", tmp_path / "res"
    torchrun = ["--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", h.free_port()]
    if order == "commtrace under torchrun":
        args = [h.TORCHRUN, *torchrun, "-m", "commtrace", "run", "-o", run_dir, worker("trun.py"), out]
    else:
        args = [h.PY, "-m", "commtrace", "run", "-o", run_dir, "torchrun", *torchrun, worker("trun.py"), out]
    res = h.run(args, timeout=120, env=h.clean_env(PATH=h.BIN + os.pathsep + os.environ.get("PATH", "")))
    res.check(0)
    import json
    for r in range(2):
        got = json.loads(open(f"{out}.rank{r}").read())
        assert got == {"backend": "gloo", "world": 2, "sum": 2.0, "local_rank": str(r)}
    df = h.load(run_dir)
    assert sorted(df["rank"]) == [0, 1]
    assert df["op"].tolist() == ["all_reduce"] * 2 and set(df["bytes"]) == {16}
    assert df["seq"].tolist() == [1, 1] and df["world"].nunique() == 1
    assert {p["launcher"] for p in df.attrs["processes"]} == {"torchrun"}


def test_pool_workers_terminated_by_their_pool_are_no_problem(tmp_path):
    """Pool.terminate() SIGTERMs its workers: untraced they die silently, so traced
    they print nothing either, and check finds no problem in it (info only)."""
    run_dir = tmp_path / "run"
    plain = h.run([h.PY, worker("pool.py")], timeout=60).check(0)
    res = h.run(h.commtrace_cmd(run_dir, worker("pool.py")), timeout=60).check(0)
    assert res.stdout == plain.stdout == "[1, 4, 9]\n"
    assert [line for line in res.stderr.splitlines() if not line.startswith("commtrace: trace written")] == []
    workers = [f for f in os.listdir(run_dir) if f.startswith("proc.") and f.endswith(".meta.jsonl")]
    assert len(workers) >= 2  # the pool's workers were traced
    chk = h.commtrace_main("check", run_dir)
    chk.check(0)
    assert "ERROR" not in chk.stdout


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_how_a_multiprocessing_child_ended_is_in_its_trace(tmp_path, method):
    """multiprocessing closes a forked child's trace in its finalizers, before it turns the
    program's SystemExit or exception into the exit code (a spawned child's atexit close comes
    after it has): both still record the code, and the exception, so ``check`` names them."""
    run_dir = tmp_path / "run"
    res = h.run(h.commtrace_cmd(run_dir, worker("child_exit.py"), method, h.free_port()), timeout=120)
    res.check(0)
    assert "exit codes [10, 1]" in res.stdout
    procs = {p["rank"]: p for p in h.load(run_dir).attrs["processes"] if p["rank"] is not None}
    assert procs[0]["end"]["exit_code"] == 10 and procs[0]["end"]["how"] == "exit", procs[0]["end"]
    assert procs[1]["end"]["exit_code"] == 1 and procs[1]["end"]["how"] == "exception", procs[1]["end"]
    assert procs[1]["exception"]["exc_type"] == "ValueError", procs[1]["exception"]
    out = h.commtrace_main("check", run_dir).stdout
    assert "10" in out and "ValueError" in out, out


def test_exit_codes_of_ranks_started_as_subprocesses(tmp_path):
    """Ranks traced by the boot sitecustomize (a subprocess, torchrun's ranks, ``COMMTRACE=1``):
    their end records carry the exit code where Python tells it (before: null but for an
    uncaught exception): ``sys.exit(10)`` -> 10; a KeyboardInterrupt -> 130, as ``commtrace run``
    says; a sys.exit the program caught is no exit code (the script's end: unknown, null)."""
    run_dir = tmp_path / "run"
    res = h.run(h.commtrace_cmd(run_dir, worker("sub_exit.py"), h.free_port()), timeout=120)
    res.check(0)
    assert f"exit codes [10, 0, {-signal.SIGINT}]" in res.stdout, res.stdout
    procs = {p["rank"]: p for p in h.load(run_dir).attrs["processes"] if p["rank"] is not None}
    assert (procs[0]["end"]["exit_code"], procs[0]["end"]["how"]) == (10, "exit"), procs[0]["end"]
    assert (procs[1]["end"]["exit_code"], procs[1]["end"]["how"]) == (None, "exit"), procs[1]["end"]
    assert (procs[2]["end"]["exit_code"], procs[2]["end"]["how"]) == (130, "exception"), procs[2]["end"]
    out = h.commtrace_main("check", run_dir).stdout
    assert "rank 0 exited with code 10" in out, out
    assert "KeyboardInterrupt" in out, out
