"""Turn tracing on in this process: from ``commtrace run`` or in a traced child.

At once only the start record (``Recorder.start``); the hooks are installed when
``import torch`` finishes, so a child that never touches torch pays one small file write.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading

from ..errors import exit_status
from ..trace import schema
from .scopes import AfterImport, drop_own_frame

# Hook the end of `import torch` itself: torch imports torch.distributed, DDP and the optimizers
# while it initializes, and patching them half-way through that would break torch's own circular
# imports. No process group can exist before `import torch` returns, so nothing is missed.
_TORCH = "torch"
_state: dict = {}
_lock = threading.Lock()


def active_recorder():
    """The Recorder of this process, or None when not tracing."""
    return _state.get("recorder")


def _inherited_command() -> list[str]:
    """The command ``commtrace run`` traced (a spawned rank's argv is ``-c ...``), else sys.argv."""
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
        from .launch import detect
        from .recorder import Recorder

        # A process under a launcher of its own (torchrun's ranks, a traced program's child
        # started by mpirun) takes its name, not the one inherited from the traced parent.
        launcher = detect(os.environ).launcher
        if launcher != "none":
            os.environ[schema.ENV_LAUNCHER] = launcher
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
        sys.meta_path.insert(0, AfterImport({_TORCH: lambda torch: _install()}, "tracing"))
    return True


def _install() -> None:
    with _lock:
        rec = _state.get("recorder")
        if rec is None or _state.get("installer") is not None:
            return
        from .hook import Installer
        from .phases import PhaseHooks, label_c10d_calls

        inst = Installer(rec)
        inst.install()
        _state["installer"] = inst
        _optional("c10d call labels", lambda: label_c10d_calls(rec))
        hooks = _state["phases"] = PhaseHooks(rec)
        _optional("phase annotations", hooks.install)
    _flush_in_multiprocessing_children(_state["recorder"])
    _exit_info_of_multiprocessing_children()
    _close_before_os_exit()
    _note_sys_exit()
    _optional("mpi backend", _install_mpi_backend, "not available")
    from . import watchdog  # imported once torch is: a child that never imports torch skips it
    _optional("watchdog", lambda: watchdog.install(active_recorder()))


def _optional(what: str, install, failed: str = "disabled") -> None:
    """Run ``install``; a failure costs that feature only (one line), never tracing."""
    try:
        install()
    except Exception as exc:
        sys.stderr.write(f"commtrace: {what} {failed}: {exc}\n")


def _flush_in_multiprocessing_children(rec) -> None:
    """Close the recorder at the end of a forked ``multiprocessing.Process``: it skips atexit
    (``os._exit``) but runs finalizers, registered after the fork clears them."""
    import multiprocessing.util as mpu
    # exitpriority -1: after the program's own finalizers
    mpu.register_after_fork(rec, lambda r: mpu.Finalize(None, r.close, exitpriority=-1))


def _exit_info_of_multiprocessing_children() -> None:
    """A ``multiprocessing.Process`` child's exit code and uncaught exception: its ``_bootstrap``
    runs the finalizers (where a forked child's trace closes) in a ``finally`` while the
    program's SystemExit or exception is still propagating, and prints or converts it only after
    them (a spawned child's atexit close comes later still). So ``util._exit_function`` reads it."""
    import multiprocessing
    import multiprocessing.util as mpu
    real = mpu._exit_function
    if getattr(real, "_commtrace_exit_info", False):
        return

    @functools.wraps(real)
    def _exit_function(*args, **kwargs):
        rec = _state.get("recorder")
        # not in a child (the main process's atexit call): the runner or the atexit close says how it ended
        if rec is not None and rec.exit_info is None and not rec.closed \
                and multiprocessing.parent_process() is not None:
            exc = sys.exc_info()[1]
            if isinstance(exc, SystemExit):   # _bootstrap's exit code: int as is, None 0, else 1
                rec.exit_info = (exit_status(exc.code), "exit")
            elif exc is not None:
                with contextlib.suppress(Exception):
                    rec.record_exception(exc)
                rec.exit_info = (1, "exception")
            else:
                rec.exit_info = (0, "exit")
        return real(*args, **kwargs)

    _exit_function._commtrace_exit_info = True
    mpu._exit_function = _exit_function


def _close_before_os_exit() -> None:
    """``os._exit`` (which skips atexit, where the trace is closed) closes the trace first,
    with its exit code, then exits as asked."""
    real = os._exit
    if getattr(real, "_commtrace_closes", False):
        return

    @functools.wraps(real)
    def _exit(status):
        rec = _state.get("recorder")
        if rec is not None and not rec.closed:
            with contextlib.suppress(BaseException):  # the process exits whatever happens here
                rec.close(exit_code=status if isinstance(status, int) else None, how="exit")
        real(status)

    _exit._commtrace_closes = True
    os._exit = _exit


def _note_sys_exit() -> None:
    """``sys.exit`` on the main thread hands its SystemExit to the recorder (``Recorder.sys_exit``):
    a process not run by ``commtrace run`` (``COMMTRACE=1``, a subprocess of a traced run) ends
    its trace with that exit code if the exception ended the process. ``raise SystemExit`` is
    not seen: its exit code stays null."""
    real = sys.exit
    if getattr(real, "_commtrace_notes", False):
        return

    @functools.wraps(real)
    def exit(*args):
        try:
            real(*args)
        except SystemExit as exc:
            rec = _state.get("recorder")
            if rec is not None and threading.get_ident() == threading.main_thread().ident:
                rec.sys_exit = exc
            drop_own_frame(exc)   # its traceback reads as without commtrace
            raise

    exit._commtrace_notes = True
    sys.exit = exit


def _install_mpi_backend() -> None:
    """Serve an explicit ``init_process_group("mpi")`` when torch lacks MPI, under an MPI
    launcher; is_mpi_available() stays False (accelerate chooses its backend by it)."""
    import torch.distributed as dist
    if dist.is_mpi_available() or os.environ.get(schema.ENV_LAUNCHER) not in ("openmpi", "mpich"):
        return
    from .. import mpi as ct_mpi
    ct_mpi.serve_requests()
