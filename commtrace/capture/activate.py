"""Turn tracing on in this process: from ``commtrace run`` or in a traced child.

At once: the process's start record (its trace file with the command and the
launcher's variables, see ``Recorder.start``), so that a process that dies
before it creates a process group still leaves one. Nothing heavy happens
until the program imports torch.distributed: an import hook waits for
``import torch`` to finish and installs the process group hook right after it
loads. A child that never touches torch pays this module's import and one
small file write.
"""
from __future__ import annotations

import functools
import importlib.machinery
import json
import os
import signal
import sys
import threading

from ..trace import schema

# Hook the end of `import torch` itself: torch imports torch.distributed, DDP and
# the optimizers while it initializes, and patching them half-way through that
# would break torch's own circular imports. No process group can exist before
# `import torch` returns, so nothing is missed.
_TORCH = "torch"
_state: dict = {}
_lock = threading.Lock()


def active_recorder():
    """The Recorder of this process, or None when not tracing."""
    return _state.get("recorder")


def _inherited_command() -> list[str]:
    """The command ``commtrace run`` traced (a spawned rank's own argv is
    ``-c --multiprocessing-fork ...``); this process's argv if there is none."""
    try:
        cmd = json.loads(os.environ.get(schema.ENV_COMMAND) or "null")
    except ValueError:
        cmd = None
    if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
        return cmd
    return list(sys.argv)


def activate_from_env(command: list[str] | None = None) -> bool:
    """Start tracing if ``COMMTRACE_DIR`` is set. Idempotent; returns whether active."""
    run_dir = os.environ.get(schema.ENV_DIR)
    if not run_dir:
        return False
    with _lock:
        if _state.get("recorder") is not None:
            return True
        from .recorder import Recorder

        rec = Recorder(
            run_dir=run_dir,
            run_id=os.environ.get(schema.ENV_RUN_ID, "run"),
            launcher=os.environ.get(schema.ENV_LAUNCHER, "none"),
            command=command if command is not None else _inherited_command(),
        )
        _state["recorder"] = rec
    try:
        rec.start()
    except OSError as exc:  # an unwritable run directory must not stop the program
        sys.stderr.write(f"commtrace: cannot write the trace of pid {os.getpid()}: {exc}\n")
    if _TORCH in sys.modules and hasattr(sys.modules[_TORCH], "distributed"):
        _install()
    else:
        sys.meta_path.insert(0, _TorchImportFinder())
    return True


def _install() -> None:
    with _lock:
        rec = _state.get("recorder")
        if rec is None or _state.get("installer") is not None:
            return
        from .hook import Installer

        inst = Installer(rec)
        inst.install()
        _state["installer"] = inst
        try:
            from . import objects
            objects.install(rec)
        except Exception as exc:  # labels are optional; tracing is not
            sys.stderr.write(f"commtrace: object collective labels disabled: {exc}\n")
        try:
            from .phases import PhaseHooks
            hooks = PhaseHooks(rec)
            hooks.install()
            _state["phases"] = hooks
        except Exception as exc:  # annotations are optional; tracing is not
            sys.stderr.write(f"commtrace: phase annotations disabled: {exc}\n")
    _flush_in_multiprocessing_children(_state["recorder"])
    _close_before_os_exit()
    _install_mpi_backend()
    _install_signal_handlers()
    _install_watchdog()


def _flush_in_multiprocessing_children(rec) -> None:
    """Close the recorder at the end of a forked ``multiprocessing.Process``.

    A fork-started Process ends with ``os._exit`` after its target: atexit
    handlers never run there, so the child's ops would be lost. Its own exit path
    does run multiprocessing finalizers, which are cleared right after the fork;
    ``register_after_fork`` callbacks run after that clearing, in the child.
    """
    import multiprocessing.util as mpu

    def after_fork(r):
        mpu.Finalize(None, r.close, exitpriority=-1)  # after the program's own finalizers

    mpu.register_after_fork(rec, after_fork)


def _close_before_os_exit() -> None:
    """``os._exit`` closes the trace first, then exits as asked.

    Some programs end with ``os._exit`` (to skip a slow or hanging teardown, or a
    rank that gives up); it skips atexit, where the trace is closed, so the ops of
    the last flush interval -- every op of a short run -- were lost, and check
    took the rank for one that never arrived. The exit code is recorded."""
    real = os._exit
    if getattr(real, "_commtrace_closes", False):
        return

    @functools.wraps(real)
    def _exit(status):
        rec = _state.get("recorder")
        if rec is not None and not rec.closed:
            try:
                rec.close(exit_code=status if isinstance(status, int) else None, how="exit")
            except BaseException:  # noqa: BLE001 - the process exits whatever happens here
                pass
        real(status)

    _exit._commtrace_closes = True
    os._exit = _exit


def _install_mpi_backend() -> None:
    """Serve an explicit init_process_group("mpi") / new_group(backend="mpi") when
    torch lacks MPI, under an MPI launcher (see commtrace.mpi.serve_requests).
    Nothing a program can probe changes: is_mpi_available() stays False, or
    programs that choose their backend by it (accelerate) would pick "mpi"."""
    import torch.distributed as dist
    if dist.is_mpi_available() or os.environ.get(schema.ENV_LAUNCHER) not in ("openmpi", "mpich"):
        return
    try:
        from .. import mpi as ct_mpi
        ct_mpi.serve_requests()
    except Exception as exc:
        sys.stderr.write(f"commtrace: mpi backend not available: {exc}\n")


def add_clock(line: dict) -> None:
    """Record a clock measurement made by the launcher (``commtrace run``)."""
    rec = active_recorder()
    if rec is not None:
        rec.mark_clock(line)


def _install_signal_handlers() -> None:
    """SIGTERM/SIGINT flush the trace, then behave as they would have."""
    if threading.current_thread() is not threading.main_thread():
        return
    from . import sigview
    for sig in (signal.SIGTERM,):
        prev = sigview.real_getsignal(sig)
        if prev not in (signal.SIG_DFL, None):
            continue  # the program handles it; our flush thread and atexit still run

        def handler(signum, frame, _sig=sig):
            rec = active_recorder()
            if rec is not None:
                _watchdog_dump(rec, "SIGTERM")
                rec.close(exit_code=128 + signum, how="signal")
            sigview.uninstall(_sig)
            os.kill(os.getpid(), _sig)

        sigview.install(sig, handler)  # invisible to the program (see sigview)


def _install_watchdog() -> None:
    """Hang watchdog, SIGUSR1/SIGTERM state dumps (commtrace.capture.watchdog)."""
    try:
        from . import watchdog
        watchdog.install(active_recorder())
    except Exception as exc:  # dumps are optional; tracing is not
        sys.stderr.write(f"commtrace: watchdog disabled: {exc}\n")


def _watchdog_dump(rec, reason: str) -> None:
    try:
        from . import watchdog
        watchdog.dump_once(rec, reason)
    except Exception:
        pass


class _TorchImportFinder:  # a meta path finder (importlib.abc would cost every child ~5 ms)
    """Runs ``_install`` right after the torch package has finished loading."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _TORCH:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        orig_exec = loader.exec_module

        def exec_module(module):
            orig_exec(module)
            try:
                _install()
            except Exception as exc:
                sys.stderr.write(f"commtrace: tracing disabled: {exc}\n")

        loader.exec_module = exec_module
        return spec
