"""The launcher variables a process's trace header records (``launch_env``).

Its own module because every traced process imports it at start: it must stay
as light as a tuple (``launch`` pulls in hashing, sockets and dataclasses).
"""
from __future__ import annotations

# The variables launchers set to tell a process who it is and how to meet the
# others. A fixed list, never the whole environment: it may hold secrets.
LAUNCH_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALRANKID",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_ID",
)


def launcher_env(env) -> dict:
    """The launcher variables present in ``env`` (a mapping such as os.environ)."""
    return {k: env[k] for k in LAUNCH_VARS if k in env}
