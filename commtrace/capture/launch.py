"""Launcher detection: which launcher started this process, and the torch env it implies.

Pure functions over an environment mapping, so they are unit-testable without
launching anything. ``apply_rank_env`` fills in RANK/WORLD_SIZE/LOCAL_RANK from
the launcher's own variables and never overwrites what the user set.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Mapping, MutableMapping

from ..trace import schema


@dataclass(frozen=True)
class LaunchInfo:
    launcher: str            # "openmpi" | "mpich" | "slurm" | "torchrun" | "none"
    rank: int | None
    world_size: int | None
    local_rank: int | None

    @property
    def is_mpi(self) -> bool:
        return self.launcher in ("openmpi", "mpich")


def _int(env: Mapping[str, str], name: str) -> int | None:
    v = env.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        return None


def detect(env: Mapping[str, str]) -> LaunchInfo:
    """Identify the launcher from its environment variables.

    torchrun wins when its variables are present (it may itself run under
    Slurm); then MPI (mpirun inside an allocation still sets SLURM_*); then Slurm.
    """
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "LOCAL_WORLD_SIZE" in env):
        return LaunchInfo("torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK"))
    if "OMPI_COMM_WORLD_RANK" in env:
        return LaunchInfo(
            "openmpi",
            _int(env, "OMPI_COMM_WORLD_RANK"),
            _int(env, "OMPI_COMM_WORLD_SIZE"),
            _int(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
        )
    if "PMI_RANK" in env:
        local = _int(env, "MPI_LOCALRANKID")
        if local is None:
            local = _int(env, "PMI_LOCAL_RANK")
        return LaunchInfo("mpich", _int(env, "PMI_RANK"), _int(env, "PMI_SIZE"), local)
    if "SLURM_PROCID" in env and ("SLURM_NTASKS" in env or "SLURM_NPROCS" in env):
        size = _int(env, "SLURM_NTASKS")
        if size is None:
            size = _int(env, "SLURM_NPROCS")
        return LaunchInfo("slurm", _int(env, "SLURM_PROCID"), size, _int(env, "SLURM_LOCALID"))
    return LaunchInfo("none", None, None, None)


def apply_rank_env(info: LaunchInfo, env: MutableMapping[str, str]) -> list[str]:
    """Set RANK/WORLD_SIZE/LOCAL_RANK that are missing; return the names set."""
    set_names = []
    for name, value in (("RANK", info.rank), ("WORLD_SIZE", info.world_size), ("LOCAL_RANK", info.local_rank)):
        if value is not None and name not in env:
            env[name] = str(value)
            set_names.append(name)
    return set_names


ENV_LAUNCHER_ENV = "COMMTRACE_LAUNCHER_ENV"   # 0/false/no/off: leave the launcher variables alone


def launcher_env_wanted(env: Mapping[str, str]) -> bool:
    """False when the user asked commtrace not to set launcher variables."""
    return env.get(ENV_LAUNCHER_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def needs_rendezvous(info: LaunchInfo, env: Mapping[str, str]) -> bool:
    return info.is_mpi and ("MASTER_ADDR" not in env or "MASTER_PORT" not in env)


def free_port() -> int:
    """A TCP port free right now on this host (bound and released, never listened on)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def host_address() -> str:
    """An address other hosts can use to reach this one (best effort)."""
    name = socket.gethostname()
    try:
        addr = socket.gethostbyname(name)
    except OSError:
        return "127.0.0.1"
    return addr


def new_run_id() -> str:
    """A run id, also the run directory's name: local date and time, then 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def launcher_run_id(info: LaunchInfo, env: Mapping[str, str]) -> str | None:
    """A run id every rank can derive on its own, when the launcher gives one."""
    if info.launcher == "slurm" and "SLURM_JOB_ID" in env:
        return f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}"
    if info.launcher == "torchrun":
        rid = env.get("TORCHELASTIC_RUN_ID", "none")
        if rid and rid != "none":
            return f"torchrun-{rid}"
        # Ranks on one node share the agent's pid; multi-node runs should pass -o or --rdzv-id.
        return f"torchrun-{socket.gethostname()}-{os.getppid()}"
    return None


DEFAULT_BASE = "commtrace-out"
CLAIMS = ".claims"           # under the base directory: one file per launcher job (claim_name)
CLAIM_STALE_S = 24 * 3600    # an older claim belongs to an earlier job that reused the key
CLAIM_WAIT_S = 5.0


def claim_name(base: str, key: str, wait_s: float = CLAIM_WAIT_S) -> str:
    """The run directory name of launcher job ``key`` (torchrun, Slurm), in the same
    form as every other run's (``new_run_id``): the first rank to ask creates
    ``<base>/.claims/<hash of key>`` exclusively and writes a new name in it; the
    others read that name. Ranks that do not share ``base`` (other hosts without a
    shared file system) each name their own directory."""
    claims = os.path.join(base, CLAIMS)
    os.makedirs(claims, exist_ok=True)
    path = os.path.join(claims, hashlib.sha1(key.encode()).hexdigest()[:16])
    try:
        if time.time() - os.path.getmtime(path) > CLAIM_STALE_S:
            os.replace(path, path + ".stale")   # atomic: one rank moves it; later ones see no file
    except OSError:
        pass
    name = new_run_id()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        deadline = time.monotonic() + wait_s
        while True:   # the claimer writes right after creating the file
            try:
                with open(path) as f:
                    text = f.read().strip()
            except OSError:
                text = ""
            if _RUN_ID_RE.match(text) or time.monotonic() > deadline:
                return text if _RUN_ID_RE.match(text) else name
            time.sleep(0.01)
    with os.fdopen(fd, "w") as f:
        f.write(name + "\n")
    return name


_RUN_ID_RE = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


def resolve_run_dir(output: str | None, run_id: str, base: str = DEFAULT_BASE, key: str | None = None) -> str:
    """The absolute run directory: ``output`` if given, else ``./<base>/<name>``
    where name is ``run_id`` or, for a launcher job ``key``, its claimed name."""
    if output:
        return os.path.abspath(output)
    return os.path.abspath(os.path.join(base, claim_name(base, key) if key else run_id))


def display_path(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def export_run_env(run_dir: str, run_id: str, launcher: str, env: MutableMapping[str, str]) -> None:
    env[schema.ENV_DIR] = run_dir
    env[schema.ENV_RUN_ID] = run_id
    env[schema.ENV_LAUNCHER] = launcher
