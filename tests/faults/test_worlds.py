"""Several worlds in one traced run (a test suite spawning fresh ranks per test): `commtrace check`
tells each world's rank 1 apart -- its own last op, its own end -- and names the world as the
report does: w0, w1 in the order they were created (their ids stay in the findings' ``world``)."""
from __future__ import annotations

import re

import pytest

from commtrace.analysis import check as C

from .conftest import SCRIPTS, diagnose_dir, findings_text, free_port, kinds, traced_spawn

SCRIPT = "worlds_faults.py"
# Each launch here starts two or more worlds of spawned ranks in turn: ~19 s alone, but past
# traced_spawn's 60 s default at load ~25 in a whole run (both test_each_world_rank_is_its_own_process
# cases failed so, 2026-11-29). A bound for a stuck launch, not a measure.
TIMEOUT = 180


def _line(marker: str) -> int:
    return next(i for i, t in enumerate(open(SCRIPTS / SCRIPT), 1) if marker in t)


def _world_of(run, function: str) -> str:
    """The id of the world whose ranks ran ``function`` (its group's ops say so)."""
    f = run.frame
    return str(f.loc[f["callsite"].astype(str).str.contains(function), "world"].iloc[0])


def _process_findings(findings, rank):
    return [f for f in findings if f.kind in (C.EXITED, C.ABRUPT, C.EXCEPTION) and f.ranks == [rank]]


def _banner(run_dir) -> str:
    """The report's banner rows for ``run_dir``, as the terminal prints them (one line each)."""
    import io

    from commtrace.analysis.partitioned import analyse
    from commtrace.render.terminal import make_console, render_banner
    out = io.StringIO()
    render_banner(make_console(400, out), analyse(str(run_dir)))
    return out.getvalue()


@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_each_world_rank_is_its_own_process(tmp_path, mode):
    """World 1's rank 1 exits with code 7 (or sleeps while rank 0 waits until the hang watchdog
    aborts it); world 2 runs clean afterwards, its last op a broadcast. Each rank of world 1 is told
    with world 1's last op and its own end; world 2's ranks ended well: no finding about them."""
    p = traced_spawn(tmp_path / "run", mode, free_port(), free_port(), hang_timeout=2 if mode == "hang" else None,
                     script=SCRIPT, timeout=TIMEOUT)
    assert p.returncode == 1, p.stderr[-3000:]
    run, findings = diagnose_dir(tmp_path / "run")
    w1 = _world_of(run, "first_world")
    assert len({str(w) for w in run.frame["world"].unique()}) == 2
    first_calls = f"{SCRIPT}:{_line('# WORLD1')} (first_world)"
    na = kinds(findings)[C.NOT_ARRIVED]
    assert len(na) == 1 and na[0].world == w1 and na[0].data["missing"] == [1]
    story = next(d for d in na[0].details if d.startswith("rank 1 never arrived"))
    assert f"last call seq 2 all_reduce [completed] at tests/faults/scripts/{first_calls}" in story, story
    end1 = "exited with code 7" if mode == "exit" else "terminated by SIGTERM (exit code 143)"
    assert story.endswith(end1), story
    # rank 1: world 1's process, by its world; its last op is world 1's, not world 2's broadcast
    (f1,) = _process_findings(findings, 1)
    assert f1.world == w1 and f1.title == f"rank 1 of world w0 {end1}", f1.title
    # a SIGTERM dumps before it ends the rank: check says where it was (its own world's sleep)
    assert f1.details[0] == f"last op: all_reduce seq 2 [completed] at tests/faults/scripts/{first_calls}"
    assert [re.sub(r":\d+ ", ":N ", d) for d in f1.details[1:]] == (
        [] if mode == "exit" else ["rank 1 was at worlds_faults.py:N time.sleep(120) (SIGTERM dump)"])
    # rank 0 of world 1 was left waiting in seq 3
    f0 = _process_findings(findings, 0)
    assert [f.world for f in f0] == [w1], [f.title for f in f0]
    if mode == "hang":
        assert f0[0].title == f"rank 0 of world w0 aborted by the hang watchdog (--abort-on-hang, exit code 3)"
        assert f0[0].details[0].startswith("last op: all_reduce seq 3 [in_flight]")
    text = findings_text(findings)
    assert "broadcast" not in text and "second_world" not in text
    # no process of world 2 ended badly: every process finding is about world 1
    assert {f.world for f in findings if f.kind in (C.EXITED, C.ABRUPT, C.EXCEPTION) and f.ranks} == {w1}
    # the report's "ended" row names world 1's ranks by their world: world 2's rank 1 ended well
    ended = next(line for line in _banner(tmp_path / "run").splitlines() if line.startswith("  ended "))
    assert f" w0:r1: {end1}" in ended and " w0:r0: " in ended and "w1:" not in ended, ended


def test_a_rank_killed_in_a_later_world_is_named_by_its_world(tmp_path):
    """World 1 runs clean; world 2's rank 1 is SIGKILLed after its 2nd all_reduce: its trace ends
    abruptly, told as rank 1 of world 2 with world 2's last op; world 1's rank 1 ended well."""
    p = traced_spawn(tmp_path / "run", "kill-second", free_port(), free_port(), script=SCRIPT, timeout=TIMEOUT)
    assert p.returncode == 1, p.stderr[-3000:]
    run, findings = diagnose_dir(tmp_path / "run")
    w1, w2 = _world_of(run, "first_world"), _world_of(run, "second_world")
    assert w1 != w2
    na = kinds(findings)[C.NOT_ARRIVED]
    assert [(f.world, f.seq, f.data["missing"]) for f in na] == [(w2, 3, [1])]
    site = f"tests/faults/scripts/{SCRIPT}:{_line('# WORLD2')} (second_world)"
    assert any(d.startswith(f"rank 1 never arrived: last call seq 2 all_reduce [completed] at {site}")
               for d in na[0].details), na[0].details
    abrupt = [f for f in kinds(findings)[C.ABRUPT] if f.ranks == [1]]
    assert [f.title for f in abrupt] == [f"rank 1 of world w1: trace ends abruptly (killed, e.g. SIGKILL, or "
                                         "still running)"]
    assert abrupt[0].details[0] == f"last op: all_reduce seq 2 [completed] at {site}"
    assert "w0" not in findings_text(findings).split("progress per group")[0]


def test_unmatched_send_and_damaged_files_name_their_world(tmp_path):
    """World 2's rank 0 sends to its rank 1, which never receives: the unmatched send is told as
    rank 0 of world 2's. Then both worlds' rank 1 ops files get stray bytes (damaged alike): one
    damage finding per world, each naming its world and its own file -- not one "rank 1" for both."""
    import shutil
    p = traced_spawn(tmp_path / "run", "p2p-second", free_port(), free_port(), hang_timeout=2, script=SCRIPT, timeout=TIMEOUT)
    assert p.returncode == 1, p.stderr[-3000:]
    run, findings = diagnose_dir(tmp_path / "run")
    w1, w2 = _world_of(run, "first_world"), _world_of(run, "second_world")
    (f,) = kinds(findings)[C.P2P_UNMATCHED]
    site = f"tests/faults/scripts/{SCRIPT}:{_line('# WORLD2 SEND')} (second_world)"
    assert f.title == f"rank 0 of world w1 send to rank 1 #1 ([[8]]) has no matching recv [in_flight]", f.title
    assert (f.world, f.ranks, f.details) == (w2, [0], [f"called at {site}"])
    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path / "run", damaged)
    stems = {}
    for pr in run.processes:
        if pr["rank"] == 1 and pr["worlds"]:
            stems[pr["worlds"][0]] = pr["file"][: -len(".meta.jsonl")]
            with open(damaged / (stems[pr["worlds"][0]] + ".ops.bin"), "ab") as fh:
                fh.write(b"xyz")
    assert sorted(stems) == sorted([w1, w2])
    _, findings = diagnose_dir(damaged)
    got = sorted((f.world, f.ranks, f.title) for f in kinds(findings)[C.DAMAGED])
    assert got == sorted((w, [1], f"rank 1 of world {name}: trace damaged: {stems[w]}.ops.bin truncated mid-record")
                         for w, name in ((w1, "w0"), (w2, "w1"))), got


def test_a_process_of_two_worlds_with_other_ranks(tmp_path):
    """Processes that are ranks of two worlds with a different rank in each (0 and 1 of w-A, then
    2 and 0 of w-B; a third process rank 1 of w-B, which exits with code 7): each world's members
    are found under their rank there (before: rank 2 of w-B "no trace file", and check crashed
    on two rows of "rank 0" at one seq); worlds are named as the report names them, not by id."""
    from commtrace.trace import reader
    p = traced_spawn(tmp_path / "run", "exit", free_port(), free_port(), script="two_worlds_two_ranks.py", timeout=TIMEOUT)
    assert p.returncode == 1, p.stderr[-3000:]
    run, findings = diagnose_dir(tmp_path / "run")
    assert C.MISSING_RANK not in kinds(findings), findings_text(findings)
    three = {str(w) for w in run.frame.loc[run.frame["group_ranks"].astype(str) == "0,1,2", "world"]}
    (wb,) = three
    assert sorted(run.frame.loc[run.frame["world"].astype(str) == wb, "rank"].unique().tolist()) == [0, 1, 2]
    procs = [reader.read_process(m, [], records=False) for m in reader.find_traces(str(tmp_path / "run"))]
    numbers = reader.number_worlds(procs)   # the report's: w0, w1
    (name,) = {f"w{numbers[pt.meta_path]}" for pt in procs if pt.world_id == wb}
    (exited,) = kinds(findings)[C.EXITED]
    assert (exited.world, exited.title) == (wb, f"rank 1 of world {name} exited with code 7"), exited.title
    text = findings_text(findings)
    assert wb not in text and f"group 0 (default_pg) of world {name}: last seq completed: rank 0-2: 2" in text, text


def test_worlds_made_again_on_one_store_have_their_own_ids(tmp_path):
    """A store outlives the worlds made on it: world 2's rank 1 took world 1's id, still in the
    store, before its rank 0 published world 2's ("world ...: ranks missing: 1 of 2"). Now each
    world's id has its own key: both ranks name the same two worlds, in the same order."""
    from commtrace.trace import reader
    p = traced_spawn(tmp_path / "run", "run", free_port(), script="worlds_one_store.py", timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr[-3000:]
    procs = [reader.read_process(m, [], records=False) for m in reader.find_traces(str(tmp_path / "run"))]
    ids = {pt.rank: [str(w["world_id"]) for w in pt.worlds] for pt in procs if pt.rank is not None}
    assert sorted(ids) == [0, 1] and len(set(ids[0])) == 2 and sorted(ids[0]) == sorted(ids[1]), ids
    run, findings = diagnose_dir(tmp_path / "run")
    assert C.MISSING_RANK not in kinds(findings), findings_text(findings)
    assert len({str(w) for w in run.frame["world"].unique()}) == 2
