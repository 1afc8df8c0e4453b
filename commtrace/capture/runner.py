"""``commtrace run``: prepare the environment, start tracing, run the script as __main__."""
from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import runpy
import shutil
import sys
import traceback
import types
from dataclasses import dataclass

from .. import mpienv, torch_compat
from ..errors import CommtraceError, exit_status, report
from ..trace import schema
from . import activate, envreads, launch, sigview

@dataclass
class RunOptions:
    target: str                 # script path, or module name when is_module
    args: list[str]
    is_module: bool = False
    output: str | None = None
    hang_timeout: float | None = None
    abort_on_hang: bool = False
    bounded: object = None      # capture.bounded.Options (--keep-last, --steps), or None
    launcher_env: bool = True   # fill in the launcher variables (False: --no-launcher-env)


def prepare_environment(opts: RunOptions) -> tuple[str, str, launch.LaunchInfo, object, list[str]]:
    """Derive rank env, rendezvous, run id and run dir; export them for children.
    The last item: the launcher variables commtrace set."""
    env = os.environ
    info = launch.detect(env)
    glue = opts.launcher_env and launch.launcher_env_wanted(env)
    set_names = launch.apply_rank_env(info, env) if glue else []
    comm = None
    if info.is_mpi:   # COMM_WORLD where mpi4py is importable
        with contextlib.suppress(ImportError):
            comm = mpienv.world()
    run_id = env.get(schema.ENV_RUN_ID) or launch.launcher_run_id(info, env)
    if comm is not None:
        # One broadcast from rank 0 settles everything the ranks must agree on.
        proposal = None
        if comm.Get_rank() == 0:  # the port rank 0's store will listen on (its address as others reach it)
            proposal = {"run_id": run_id or launch.new_run_id(),
                        "addr": launch.host_address(), "port": env.get("MASTER_PORT") or str(launch.free_port())}
        agreed = comm.bcast(proposal, root=0)
        run_id = run_id or agreed["run_id"]
        if glue and launch.needs_rendezvous(info, env):
            for name, value in (("MASTER_ADDR", agreed["addr"]), ("MASTER_PORT", agreed["port"])):
                if name not in env:
                    env[name] = value
                    set_names.append(name)
    key = run_id if comm is None and not env.get(schema.ENV_RUN_ID) else None   # a launcher job's own id
    run_id = run_id or launch.new_run_id()
    run_dir = env.get(schema.ENV_DIR) if not opts.output and env.get(schema.ENV_DIR) else \
        launch.resolve_run_dir(opts.output, run_id, key=key)
    os.makedirs(run_dir, exist_ok=True)
    launch.export_run(env, run_dir, run_id, info.launcher, opts.bounded, opts.hang_timeout, opts.abort_on_hang)
    return run_dir, run_id, info, comm, set_names


def python_command(name: str) -> str | None:
    """The path of ``name`` when it is not a file here but a Python script on PATH (a console
    script such as torchrun or accelerate), which runs like any script; else None."""
    path = None if os.path.exists(name) or os.sep in name else shutil.which(name)
    first = _first_line(path) if path else b""
    return path if first.startswith(b"#!") and b"python" in first else None


def _first_line(path: str) -> bytes:
    """The first line of a file (at most 256 bytes; b"" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.readline(256)
    except OSError:
        return b""


def missing_target(opts: RunOptions) -> str | None:
    """Why the target does not exist (one line), or None. A module is looked up by its
    top-level name only, which imports nothing."""
    if not opts.is_module:
        # a script file, or (as python runs them too) a directory or zip file with a __main__.py
        program = f"{opts.target} is a program, not a Python script: start commtrace under it " \
                  f"(e.g. {opts.target} ... python -m commtrace run SCRIPT)"
        if os.path.basename(opts.target).startswith("python"):   # not the python running commtrace (cmd_run)
            program = f"{opts.target} is another Python than the one running commtrace ({sys.executable}): " \
                      f"start commtrace with it ({opts.target} -m commtrace run SCRIPT)"
        if os.path.exists(opts.target):   # a binary or another language's script (/usr/bin/mpirun, a .sh)
            first = _first_line(opts.target)
            binary = first.startswith(b"\x7fELF") or (first.startswith(b"#!") and b"python" not in first)
            return program if binary else None
        if os.sep not in opts.target and shutil.which(opts.target):  # mpirun, srun: not Python
            return program
        return f"{opts.target}: no such file"
    top = opts.target.split(".")[0]
    try:
        found = bool(top) and importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"-m {opts.target}: no module named {top!r}"


def _missing_module(name: str) -> str | None:
    """Why ``name`` cannot run, or None: runpy's full lookup (importing parent packages)."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            return f"-m {name}: no module named {e.name!r}"
        raise
    if spec is None:
        return f"-m {name}: no module named {name!r}"
    if spec.submodule_search_locations is not None and importlib.util.find_spec(name + ".__main__") is None:
        return f"-m {name}: {name!r} is a package without a __main__ module; it cannot be run"
    return None


def run(opts: RunOptions) -> int:
    pid = os.getpid()   # a child the script forks returns through here too when it calls sys.exit
    run_dir, run_id, info, comm, set_names = prepare_environment(opts)
    why = torch_compat.unsupported_reason()
    if why and info.rank in (0, None):  # a torch outside the tested range: tracing goes on
        sys.stderr.write(f"commtrace: warning: {why}\n")
        sys.stderr.flush()
    command = [("-m " + opts.target) if opts.is_module else opts.target, *opts.args]
    os.environ[schema.ENV_COMMAND] = json.dumps(command)  # ranks the script spawns report it too
    activate.activate_from_env(command=command)
    if comm is not None:
        from . import clock
        clock.measure_mpi(activate.active_recorder(), comm, "start", deadline_s=30.0)
        mpienv.hide_from_program()  # the program sees sys.modules as it would without commtrace
        if comm.Get_rank() == 0:  # also before the script: an interrupted mpirun drops what ranks print later
            launch.say_where(run_dir, "tracing to")
    ran = True
    reads = envreads.EnvReads(set_names).start()
    try:
        code, how = _run_target(opts)
    except CommtraceError as e:  # the module does not exist after all: one line, nothing ran
        code, how, ran = report(e), "exit", False
    rec = activate.active_recorder()
    if rec is not None:
        sigview.hold_to_close()   # the program's handlers wait for the trace's close (released there)
        # written by the atexit close; set now, for a launcher may end this process by SIGTERM before
        # (in the clock measurement below, when another rank failed): its end record then says so
        rec.exit_info = (code, "exception" if how == _INTERRUPTED else how)
    read = reads.stop()
    if read and info.rank == 0:
        sys.stderr.write(envreads.notice(read) + "\n")
        sys.stderr.flush()
    if comm is not None and code == 0:
        clock.measure_mpi(rec, comm, "end", deadline_s=5.0)
    rank = rec.rank if rec is not None and rec.rank is not None else os.environ.get("RANK")
    if ran and os.getpid() == pid and str(rank) in ("0", "None"):  # rank 0, or the process spawning the ranks
        launch.say_where(run_dir, command="check" if code else "report")
    if how == _INTERRUPTED or code != 0 and mpienv.is_initialized():
        _exit_skipping_mpi_finalize(code, by_sigint=how == _INTERRUPTED)
    return code


_INTERRUPTED = "interrupted"  # how a script that ended by an uncaught KeyboardInterrupt ended


def _exit_skipping_mpi_finalize(code: int, by_sigint: bool = False) -> None:
    """A failed rank of an MPI job exits after atexit handlers, without MPI_Finalize: that
    waits for every rank, and the others may be blocked (until the backend's 30 min
    timeout) in a collective with this rank, whose groups hold its connections open.
    Untraced, the rank would just exit and the others fail at once.

    ``by_sigint``: an uncaught KeyboardInterrupt; Python then ends the process by SIGINT
    (status -2, not 130: launchers report the signal), and so does this.

    First, as Python's own shutdown does, ``threading._shutdown``: the threading atexit calls
    (an executor's idle workers are told to end) and then the join of the script's non-daemon
    threads, which run to their end (print, write files) before the atexit handlers."""
    import atexit
    import threading
    try:
        shutdown = getattr(threading, "_shutdown", None)  # CPython's step before atexit, 3.9-3.13
        if shutdown is not None and threading.current_thread() is threading.main_thread():
            shutdown()
        atexit._run_exitfuncs()
    finally:
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
        if by_sigint:
            import signal

            from .watchdog import die_by
            die_by(signal.SIGINT)
        os._exit(code)


def _run_target(opts: RunOptions) -> tuple[int, str]:
    argv0 = opts.target
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [argv0, *opts.args]
    sys.path[0] = os.getcwd() if opts.is_module else os.path.dirname(os.path.abspath(argv0))
    try:
        if opts.is_module:
            why = _missing_module(opts.target)
            if why:
                raise CommtraceError(f"run: {why}")
            runpy.run_module(opts.target, run_name="__main__", alter_sys=True)
        elif os.path.isfile(argv0):
            _run_script_file(argv0)
        else:  # a directory or zip file with a __main__.py
            runpy.run_path(argv0, run_name="__main__")
        return 0, "exit"
    except CommtraceError:
        raise
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)   # as Python prints it: the script's SystemExit stops here
        return exit_status(e.code), "exit"
    except KeyboardInterrupt as e:
        _report_exception(e)
        return 130, _INTERRUPTED
    except BaseException as e:  # the script's own uncaught exception
        _report_exception(e)
        return 1, "exception"
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0


_SCRIPT_MODULES: list = []  # the scripts run, kept until the process exits (see _run_script_file)


def _run_script_file(path: str) -> None:
    """Run a script file exactly as ``python path`` does (``runpy.run_path`` differs): the path
    cwd-joined, not normalized (``./x.py`` -> ``/cwd/./x.py``), a SourceFileLoader, no .pyc."""
    fname = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    with io.open_code(fname) as f:
        code = compile(f.read(), fname, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=fname, __cached__=None, __package__=None, __spec__=None, __builtins__=builtins,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", fname), __annotations__={})
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main  # classes the script defines pickle as __main__.X (multiprocessing)
    # Untraced, the script's globals live until exit; freed here, their destructors (a DDP
    # Reducer, its process group) would run while the trace is being finished.
    _SCRIPT_MODULES.append(main)
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _report_exception(exc: BaseException) -> None:
    """Print it as Python would, through ``sys.excepthook`` (``init_process_group`` installs one
    prefixing ``[rankN]:``), from the script's frame on, without the frames of commtrace's it
    only passed through (a program's signal handler runs under sigview's wrapper); and store it."""
    seen: set = set()
    chained: BaseException | None = exc
    while chained is not None and id(chained) not in seen:  # what Python prints: the whole chain
        seen.add(id(chained))
        # what a hook reading the exception itself finds, as without commtrace
        chained.__traceback__ = _without_passed_frames(chained.__traceback__)
        chained = chained.__cause__ or (None if chained.__suppress_context__ else chained.__context__)
    tb = exc.__traceback__
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException as hook_exc:  # Python's own words for a failing hook
        sys.stderr.write("Error in sys.excepthook:\n")
        hook_tb = hook_exc.__traceback__
        traceback.print_exception(type(hook_exc), hook_exc, hook_tb and hook_tb.tb_next, chain=False)  # from the hook on
        sys.stderr.write("\nOriginal exception was:\n")
        traceback.print_exception(type(exc), exc, tb)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    rec = activate.active_recorder()
    if rec is not None:
        rec.record_exception(exc, tb)


def _without_passed_frames(tb):
    """``tb`` from the script's frame on (not the runner's), without commtrace's frames that lead
    to a frame of the program's (a wrapper the call passed through); frames of commtrace's where
    the error arose stay."""
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    keep, program_below = [], False
    for entry in reversed(entries):
        ours = _is_ours(entry.tb_frame.f_code.co_filename)
        if not (ours and program_below):
            keep.append(entry)
        program_below = program_below or not ours
    if len(keep) == len(entries):
        return entries[0] if entries else None
    rebuilt = None
    for entry in keep:  # innermost first
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def _is_ours(filename: str) -> bool:
    return filename.startswith(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) or \
        filename == runpy.__file__ or filename.endswith(("runpy.py", "<frozen runpy>"))
