"""Launcher detection: which launcher started this process, and the torch env it implies.

Pure functions over an environment mapping (unit-testable without launching anything).
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import secrets
import socket
import sys
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


def _int(env: Mapping[str, str], *names: str) -> int | None:
    """The first of ``names`` set to an integer."""
    for name in names:
        with contextlib.suppress((KeyError, ValueError)):
            return int(env[name])
    return None


# In order: torchrun wins (it may run under Slurm), then MPI (mpirun in an allocation still
# sets SLURM_*), then Slurm. (launcher, present if any of these is set, and for rank, world
# size and local rank: the variables to read, first set wins.)
_LAUNCHERS = (
    ("torchrun", (("TORCHELASTIC_RUN_ID",), ("RANK", "LOCAL_WORLD_SIZE")),
     (("RANK",), ("WORLD_SIZE",), ("LOCAL_RANK",))),
    ("openmpi", (("OMPI_COMM_WORLD_RANK",),),
     (("OMPI_COMM_WORLD_RANK",), ("OMPI_COMM_WORLD_SIZE",), ("OMPI_COMM_WORLD_LOCAL_RANK",))),
    ("mpich", (("PMI_RANK",),), (("PMI_RANK",), ("PMI_SIZE",), ("MPI_LOCALRANKID", "PMI_LOCAL_RANK"))),
    ("slurm", (("SLURM_PROCID", "SLURM_NTASKS"), ("SLURM_PROCID", "SLURM_NPROCS")),
     (("SLURM_PROCID",), ("SLURM_NTASKS", "SLURM_NPROCS"), ("SLURM_LOCALID",))),
)


def detect(env: Mapping[str, str]) -> LaunchInfo:
    """Identify the launcher from its environment variables (``_LAUNCHERS``)."""
    for launcher, markers, fields in _LAUNCHERS:
        if any(all(m in env for m in marker) for marker in markers):
            return LaunchInfo(launcher, *(_int(env, *names) for names in fields))
    return LaunchInfo("none", None, None, None)


def apply_rank_env(info: LaunchInfo, env: MutableMapping[str, str]) -> list[str]:
    """Set RANK/WORLD_SIZE/LOCAL_RANK that are missing (never what the user set); the names set."""
    set_names = []
    for name, value in (("RANK", info.rank), ("WORLD_SIZE", info.world_size), ("LOCAL_RANK", info.local_rank)):
        if value is not None and name not in env:
            env[name] = str(value)
            set_names.append(name)
    return set_names


ENV_LAUNCHER_ENV = "COMMTRACE_LAUNCHER_ENV"   # 0/false/no/off: leave the launcher variables alone


def launcher_env_wanted(env: Mapping[str, str]) -> bool:
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
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


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


def claim_name(base: str, key: str, wait_s: float = CLAIM_WAIT_S, not_before: float | None = None) -> str:
    """The run directory name (``new_run_id``'s form) of launcher job ``key``: the first rank
    creates ``<base>/.claims/<hash of key>`` exclusively and writes it; the others read it.
    Ranks that do not share ``base`` (no shared file system) each name their own.

    A claim written before ``not_before`` (wall time; default: ``agent_started_at``) or
    CLAIM_STALE_S ago is an earlier job's that had the same key (torchrun's ``--rdzv-id``
    reused): every rank passes over it alike to the next claim file (``<hash>.1``, ...)."""
    claims = os.path.join(base, CLAIMS)
    os.makedirs(claims, exist_ok=True)
    first = os.path.join(claims, hashlib.sha1(key.encode()).hexdigest()[:16])
    if not_before is None:
        not_before = agent_started_at(key)
    oldest = max(time.time() - CLAIM_STALE_S, not_before or 0.0)
    name = new_run_id()
    for generation in itertools.count():
        path = first if generation == 0 else f"{first}.{generation}"
        with contextlib.suppress(OSError):
            if os.path.getmtime(path) < oldest:
                continue
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return _read_claim(path, name, wait_s)
        with os.fdopen(fd, "w") as f:
            f.write(name + "\n")
        return name
    raise AssertionError("unreachable")


def _read_claim(path: str, name: str, wait_s: float) -> str:
    """The name claimed in ``path``; ``name`` if none appears within ``wait_s``."""
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


def agent_started_at(key: str) -> float | None:
    """For a torchrun job's key: when this process's parent, the node's torchrun agent, started
    (wall time), else None. Every agent of a job starts before any of its workers claims, and
    a restart keeps the agents; a later job with the same ``--rdzv-id`` has new agents."""
    if not key.startswith("torchrun-"):
        return None
    try:
        with open(f"/proc/{os.getppid()}/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


_RUN_ID_RE = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


def resolve_run_dir(output: str | None, run_id: str, base: str = DEFAULT_BASE, key: str | None = None) -> str:
    """The absolute run directory: ``output`` if given, else ``./<base>/<name>``
    where name is ``run_id`` or, for a launcher job ``key``, its claimed name."""
    if output:
        return os.path.abspath(output)
    return os.path.abspath(os.path.join(base, claim_name(base, key) if key else run_id))


def say_where(run_dir: str, what: str = "trace written to", command: str = "report") -> None:
    """The one line naming the trace (relative to the working directory when inside it)
    and the command to run on it."""
    rel = os.path.relpath(run_dir)
    where = run_dir if rel.startswith("..") else rel
    sys.stderr.write(f"commtrace: {what} {where} (commtrace {command} {where})\n")
    sys.stderr.flush()


BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


def export_run(env: MutableMapping[str, str], run_dir: str, run_id: str, launcher: str, bounded=None,
               hang_timeout=None, abort_on_hang: bool = False) -> None:
    """What Python children of the run need to join it: its directory, id and launcher, the
    options they trace with (``bounded``: bounded.Options), and the PYTHONPATH on which they
    start tracing (``_boot/sitecustomize``)."""
    env[schema.ENV_DIR] = run_dir
    env[schema.ENV_RUN_ID] = run_id
    env[schema.ENV_LAUNCHER] = launcher
    env.update(bounded.env() if bounded is not None else {})
    if hang_timeout:
        env["COMMTRACE_HANG_TIMEOUT"] = str(float(hang_timeout))
        env["COMMTRACE_ABORT_ON_HANG"] = "1" if abort_on_hang else "0"
    path = env.get("PYTHONPATH")
    if BOOT_DIR not in (path or "").split(os.pathsep):
        env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + path if path else "")
