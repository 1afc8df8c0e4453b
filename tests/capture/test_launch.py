"""Launcher detection (commtrace/capture/launch.py): pure functions over env dicts."""
from __future__ import annotations

import hashlib
import os
import re

import pytest

from commtrace.capture import launch
from commtrace.trace import schema


OMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
MPICH = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0"}
INTEL = {"PMI_RANK": "5", "PMI_SIZE": "6", "PMI_LOCAL_RANK": "1"}
SLURM = {"SLURM_PROCID": "7", "SLURM_NTASKS": "16", "SLURM_LOCALID": "3", "SLURM_JOB_ID": "99", "SLURM_STEP_ID": "2"}
TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "TORCHELASTIC_RUN_ID": "abc", "MASTER_ADDR": "h", "MASTER_PORT": "1234"}


@pytest.mark.parametrize("env,expected", [
    (OMPI, launch.LaunchInfo("openmpi", 3, 8, 1)),
    (MPICH, launch.LaunchInfo("mpich", 2, 4, 0)),
    (INTEL, launch.LaunchInfo("mpich", 5, 6, 1)),
    (SLURM, launch.LaunchInfo("slurm", 7, 16, 3)),
    ({"SLURM_PROCID": "0", "SLURM_NPROCS": "2"}, launch.LaunchInfo("slurm", 0, 2, None)),
    (TORCHRUN, launch.LaunchInfo("torchrun", 1, 2, 1)),
    ({}, launch.LaunchInfo("none", None, None, None)),
    ({"PATH": "/bin", "SLURM_PROCID": "0"}, launch.LaunchInfo("none", None, None, None)),  # no task count
], ids=["openmpi", "mpich", "intelmpi", "slurm", "slurm-nprocs", "torchrun", "none", "slurm-partial"])
def test_detect(env, expected):
    assert launch.detect(env) == expected


def test_precedence():
    # torchrun inside a Slurm allocation is torchrun; mpirun inside an allocation is MPI.
    assert launch.detect({**SLURM, **TORCHRUN}).launcher == "torchrun"
    assert launch.detect({**SLURM, **OMPI}).launcher == "openmpi"
    assert launch.detect({**SLURM, **MPICH}).launcher == "mpich"
    assert launch.detect({"OMPI_COMM_WORLD_RANK": "x"}).rank is None  # garbage is not a rank


def test_apply_rank_env_fills_missing():
    env = dict(OMPI)
    assert sorted(launch.apply_rank_env(launch.detect(env), env)) == ["LOCAL_RANK", "RANK", "WORLD_SIZE"]
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("3", "8", "1")


def test_apply_rank_env_never_overwrites():
    env = {**SLURM, "RANK": "0", "WORLD_SIZE": "1"}
    assert launch.apply_rank_env(launch.detect(env), env) == ["LOCAL_RANK"]
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("0", "1", "3")
    env = {**OMPI, "LOCAL_RANK": ""}  # set, even if empty, is the user's
    launch.apply_rank_env(launch.detect(env), env)
    assert env["LOCAL_RANK"] == ""


def test_apply_rank_env_nothing_for_none():
    env = {"PATH": "/bin"}
    assert launch.apply_rank_env(launch.detect(env), env) == []
    assert env == {"PATH": "/bin"}


def test_needs_rendezvous():
    info = launch.detect(OMPI)
    assert launch.needs_rendezvous(info, OMPI)
    assert launch.needs_rendezvous(info, {**OMPI, "MASTER_ADDR": "x"})
    assert not launch.needs_rendezvous(info, {**OMPI, "MASTER_ADDR": "x", "MASTER_PORT": "1"})
    assert not launch.needs_rendezvous(launch.detect(SLURM), SLURM)
    assert not launch.needs_rendezvous(launch.detect(TORCHRUN), TORCHRUN)


def test_run_ids():
    assert launch.launcher_run_id(launch.detect(SLURM), SLURM) == "slurm-99.2"
    assert launch.launcher_run_id(launch.detect(TORCHRUN), TORCHRUN) == "torchrun-abc"
    assert launch.launcher_run_id(launch.detect(OMPI), OMPI) is None
    assert launch.launcher_run_id(launch.detect({}), {}) is None


def test_run_dir_and_export(tmp_path):
    assert launch.resolve_run_dir(str(tmp_path / "x"), "rid") == str(tmp_path / "x")
    assert launch.resolve_run_dir(None, "rid", base=str(tmp_path)) == str(tmp_path / "rid")
    env = {}
    launch.export_run(env, "/d", "rid", "openmpi")
    assert env.pop("PYTHONPATH") == launch.BOOT_DIR
    assert env == {schema.ENV_DIR: "/d", schema.ENV_RUN_ID: "rid", schema.ENV_LAUNCHER: "openmpi"}
    env = {"PYTHONPATH": "/mine"}
    launch.export_run(env, "/d", "rid", "srun", hang_timeout=5, abort_on_hang=True)
    assert env["PYTHONPATH"] == launch.BOOT_DIR + os.pathsep + "/mine"
    assert (env["COMMTRACE_HANG_TIMEOUT"], env["COMMTRACE_ABORT_ON_HANG"]) == ("5.0", "1")
    assert 0 < launch.free_port() < 65536


def test_claim_name_first_rank_names_the_run(tmp_path):
    first = launch.claim_name(str(tmp_path), "torchrun-abc")
    assert re.match(r"^\d{8}-\d{6}-[0-9a-f]{6}$", first)
    assert launch.claim_name(str(tmp_path), "torchrun-abc") == first          # the other ranks read it
    assert launch.claim_name(str(tmp_path), "slurm-7.0") != first             # another job
    claim = tmp_path / launch.CLAIMS / hashlib.sha1(b"torchrun-abc").hexdigest()[:16]
    os.utime(claim, (1, 1))                                                   # an earlier job with that key
    assert launch.claim_name(str(tmp_path), "torchrun-abc") != first
