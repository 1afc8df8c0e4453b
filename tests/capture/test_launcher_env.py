"""Launcher glue a user controls: under mpirun ``commtrace run`` fills in RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, unless ``--no-launcher-env``
or ``COMMTRACE_LAUNCHER_ENV=0``; rank 0 says in one line which of them the
program read (real mpirun, 2 ranks)."""
from __future__ import annotations

import json

import pytest

import helpers as h
from helpers import worker

from commtrace.capture import envreads

NOTICE = "commtrace: the program read"


def _run(tmp_path, mode: str, *options, MASTER_PORT=None, **env) -> tuple[list[dict], list[str]]:
    # No MASTER_PORT unless given: commtrace fills it in (the worker makes no group: no port is bound).
    res = h.run(h.mpirun_cmd(2, h.PY, "-m", "commtrace", "run", "-o", tmp_path / "run", *options,
                             worker("launcher_env.py"), mode), env=h.mpi_env(MASTER_PORT=MASTER_PORT, **env)).check()
    seen = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return seen, [line for line in res.stderr.splitlines() if line.startswith(NOTICE)]


def test_glue_sets_variables_and_rank0_names_those_read(tmp_path):
    seen, notices = _run(tmp_path, "read")
    assert sorted(s["RANK"] for s in seen) == ["0", "1"]
    assert sorted(s["LOCAL_RANK"] for s in seen) == ["0", "1"]
    # one line, from rank 0 only; WORLD_SIZE, MASTER_ADDR, MASTER_PORT were set but not read
    assert notices == [envreads.notice(["LOCAL_RANK", "RANK"])]


@pytest.mark.parametrize("given", [False, True])
def test_master_port_is_filled_in_or_kept(tmp_path, given):
    """Without MASTER_PORT, rank 0 picks one and every rank gets it; a MASTER_PORT in the
    environment is kept (how the test suite chooses every rendezvous port), MASTER_ADDR filled in."""
    port = h.free_port() if given else None
    seen, notices = _run(tmp_path, "master", MASTER_PORT=port)
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0]["MASTER_ADDR"], seen
    if given:
        assert seen[0]["MASTER_PORT"] == str(port)
        assert notices == [envreads.notice(["MASTER_ADDR"])]
    else:
        assert 0 < int(seen[0]["MASTER_PORT"]) < 65536
        assert notices == [envreads.notice(["MASTER_ADDR", "MASTER_PORT"])]


def test_no_notice_when_the_program_reads_none(tmp_path):
    seen, notices = _run(tmp_path, "nothing")
    assert seen == [{}, {}] and notices == []


def test_no_notice_when_the_program_walks_the_environment(tmp_path):
    """``os.environ.items()`` / ``values()`` look for no variable: ``import torch`` walks the
    environment (tqdm's TQDM_* options), and every program under mpirun was told it read all five;
    so were programs that saved a torch.distributed.checkpoint (fsspec's import copies it: dict(os.environ))."""
    seen, notices = _run(tmp_path, "walk")
    assert seen == [{}, {}] and notices == []


@pytest.mark.parametrize("how", ["option", "env"])
def test_launcher_env_off_leaves_variables_unset(tmp_path, how):
    options, env = (["--no-launcher-env"], {}) if how == "option" else ([], {"COMMTRACE_LAUNCHER_ENV": "0"})
    seen, notices = _run(tmp_path, "read", *options, **env)
    assert seen == [{"LOCAL_RANK": None, "RANK": None}] * 2
    assert notices == []


@pytest.mark.parametrize("value,wanted", [(None, True), ("1", True), ("0", False), ("off", False),
                                          (" False ", False), ("no", False), ("yes", True)])
def test_launcher_env_wanted(value, wanted):
    from commtrace.capture import launch
    env = {} if value is None else {launch.ENV_LAUNCHER_ENV: value}
    assert launch.launcher_env_wanted(env) is wanted
