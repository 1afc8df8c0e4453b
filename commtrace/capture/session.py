"""``commtrace.start()`` / ``commtrace.stop()`` and ``COMMTRACE=1``: tracing for programs not
launched through ``commtrace run`` (README, "Python API"). Without ``out_dir`` or
``COMMTRACE_DIR`` the ranks of one job agree on a directory name without talking: the first
claims it for the job's key (``job_key``, ``launch.claim_name``).
"""
from __future__ import annotations

import os
import socket
import sys
import threading

from .. import env_vars
from ..trace import schema
from . import activate, bounded, launch

_lock = threading.RLock()
_saved_env: dict = {}    # variables start() exported -> their values before it (None: unset)

_RUN_VARS = (schema.ENV_DIR, schema.ENV_RUN_ID, schema.ENV_LAUNCHER, schema.ENV_COMMAND, schema.ENV_KEEP_LAST,
             schema.ENV_STEPS, "COMMTRACE_HANG_TIMEOUT", "COMMTRACE_ABORT_ON_HANG", "PYTHONPATH")


class Session:
    """What ``start()`` returns: the run directory, and a context manager that stops tracing
    at its end if this call started it (not under ``commtrace run``)."""

    def __init__(self, run_dir: str, started: bool):
        self.run_dir = run_dir
        self.started = started

    def stop(self) -> str | None:
        return stop() if self.started else self.run_dir

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<commtrace session {self.run_dir!r}{'' if self.started else ' (already tracing)'}>"

    def __fspath__(self) -> str:
        return self.run_dir

    __str__ = __fspath__


def start(out_dir=None, keep_last=None, steps=None, hang_timeout=None, abort_on_hang: bool = False) -> Session:
    """``commtrace.start`` (whose docstring says what the options do)."""
    opts = bounded.make_options(keep_last, steps)
    if hang_timeout is not None and not float(hang_timeout) > 0:
        raise ValueError(f"hang_timeout {hang_timeout!r}: expected seconds (> 0)")
    with _lock:
        rec = activate.active_recorder()
        if rec is not None and not rec.closed:
            return Session(rec.run_dir, started=False)
        if rec is None and out_dir is None and os.environ.get(schema.ENV_DIR) and os.environ.get(schema.ENV_RUN_ID):
            # A child of a traced run (COMMTRACE=1 reaches it before the boot sitecustomize
            # does): it joins the run (activate_from_env names its own launcher).
            activate.activate_from_env()
            return Session(os.environ[schema.ENV_DIR], started=False)
        run_dir, run_id, launcher = _choose_run_dir(out_dir)
        command = _command()
        _export(run_dir, run_id, launcher, command, opts, hang_timeout, abort_on_hang)
        try:
            if rec is None:
                activate.activate_from_env(command=command)
            else:
                rec.reopen(run_dir, run_id, launcher, command)
                from . import watchdog
                watchdog.resume(rec)
            _adopt_existing_groups()
        except BaseException:
            env_vars.restore(_saved_env)
            raise
        return Session(run_dir, started=True)


def stop() -> str | None:
    """Close the trace as at exit (clock offsets measured again, collectively). Returns the run
    directory, None when not tracing."""
    with _lock:
        rec = activate.active_recorder()
        if rec is None or rec.closed:
            return None
        try:
            from . import clock
            clock.measure_tracked("stop")
        except Exception as exc:  # clocks are optional; the end of the trace is not
            sys.stderr.write(f"commtrace: clock offsets not measured at stop: {exc}\n")
        rec.close(how="stop")
        env_vars.restore(_saved_env)
        return rec.run_dir


def tracing() -> bool:
    rec = activate.active_recorder()
    return rec is not None and not rec.closed


def _choose_run_dir(out_dir) -> tuple[str, str, str]:
    """(absolute run directory, run id, launcher) for a new session."""
    env = os.environ
    info = launch.detect(env)
    if out_dir is None and env.get(schema.ENV_DIR):
        out_dir = env[schema.ENV_DIR]
    key = job_key(info, env)
    run_id = env.get(schema.ENV_RUN_ID) or key or launch.new_run_id()
    run_dir = launch.resolve_run_dir(os.fspath(out_dir) if out_dir is not None else None, run_id, key=key)
    os.makedirs(run_dir, exist_ok=True)
    return run_dir, run_id, info.launcher


def job_key(info: launch.LaunchInfo, env) -> str | None:
    """A string every process of this job derives alike (None: a process of its own): the
    launcher's job id, Open MPI's PMIx namespace, else the parent process (per host)."""
    key = launch.launcher_run_id(info, env)
    if key:
        return key
    host = socket.gethostname()
    if info.launcher == "openmpi":
        for name in ("PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "OMPI_MCA_ess_base_jobid"):
            if env.get(name):
                return f"openmpi-{env[name]}"
    if info.launcher != "none" or _is_multiprocessing_child():
        return f"{info.launcher}-{host}-{os.getppid()}-{_start_time(os.getppid())}"
    return None


def _is_multiprocessing_child() -> bool:
    mp = sys.modules.get("multiprocessing")
    try:
        return mp is not None and mp.parent_process() is not None
    except Exception:
        return False


def _start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot; "" where unknown):
    a recycled pid is another process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def _command() -> list[str]:
    """The command line of the traced program (inherited from a traced parent if any)."""
    inherited = activate._inherited_command()
    if os.environ.get(schema.ENV_COMMAND):
        return inherited
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    return argv[1:] if len(argv) > 1 else argv


def _export(run_dir, run_id, launcher, command, opts, hang_timeout, abort_on_hang) -> None:
    """Set the variables that make Python children join the run; ``stop()`` restores them."""
    import json

    env = os.environ
    if not _saved_env:
        _saved_env.update({k: env.get(k) for k in _RUN_VARS})
    for k in (schema.ENV_KEEP_LAST, schema.ENV_STEPS, "COMMTRACE_HANG_TIMEOUT", "COMMTRACE_ABORT_ON_HANG"):
        env.pop(k, None)
    env[schema.ENV_COMMAND] = json.dumps(command)
    launch.export_run(env, run_dir, run_id, launcher, opts, hang_timeout, abort_on_hang)


def _adopt_existing_groups() -> None:
    """Trace the process groups made before ``start()`` (none when torch is not loaded)."""
    inst = activate._state.get("installer")
    if inst is None:
        return
    try:
        inst.adopt_existing()
    except Exception as exc:  # the groups stay as they were: untraced, working
        sys.stderr.write(f"commtrace: process groups made before start() are not traced: {exc}\n")
