"""The mpi backend's optional C++ fast path (``native_mpi.cpp``): build spec and use
(docs/mpi-backend.md, "C++ fast path"). :func:`wrap` hands c10d a NativeMPIProcessGroup
over the Python group only when the extension is on, built with the flags of the MPI
mpi4py uses (its ``mpi.h`` matches ``MPI_Get_library_version``) and, at run time, calls the
library mpi4py initialized (same version string and COMM_WORLD handle) at
``MPI_THREAD_MULTIPLE``: it calls MPI without the GIL while other threads may be inside MPI.
:func:`status` says which path new groups get and why.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys

from .. import mpienv, native
from . import profiling

EXT_NAME = "mpi_fastpath"
_SOURCE = "mpi/native_mpi.cpp"

_why_no_extension = ""     # why extension() returned None
_probed: dict = {}         # build key -> module that passed the run-time checks, or a reason (str)
_last_status = "no mpi group created yet"


def _mpicc() -> str | None:
    """The C compiler wrapper of mpi4py's MPI: recorded by a source build, next to the interpreter
    from the Open MPI / MPICH wheels, else on PATH (maybe another MPI: extension() checks)."""
    cands = [os.environ.get("MPICC")]
    with contextlib.suppress(Exception):
        import mpi4py
        cands.append(mpi4py.get_config().get("mpicc"))
    cands += [os.path.join(os.path.dirname(sys.executable), "mpicc"), shutil.which("mpicc")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _wrapper_flags(mpicc: str) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) of an MPI compiler wrapper."""
    def ask(*args):
        r = subprocess.run([mpicc, *args], capture_output=True, text=True, timeout=30)
        return r.stdout.split() if r.returncode == 0 else None

    # Open MPI answers --showme:*; MPICH prints the whole command (compiler first).
    c, l = ask("--showme:compile"), ask("--showme:link")
    if c is None or l is None:
        c, l = ask("-compile_info"), ask("-link_info")
        if c is None or l is None:
            raise RuntimeError(f"{mpicc} answers neither --showme:compile nor -compile_info")
        c, l = [f for f in c[1:] if f != "-c"], [f for f in l[1:] if f != "-c"]
    return c, l


def _header_version(cflags: list[str]) -> str | None:
    """'Open MPI v5.0.11' / 'MPICH Version: 4.1.2' from the mpi.h those flags include."""
    for d in [f[2:] for f in cflags if f.startswith("-I")]:
        p = os.path.join(d, "mpi.h")
        if not os.path.isfile(p):
            continue
        with open(p, errors="replace") as f:
            text = f.read()
        v = {k: re.search(rf"#define\s+{k}\s+(\d+)", text) for k in
             ("OMPI_MAJOR_VERSION", "OMPI_MINOR_VERSION", "OMPI_RELEASE_VERSION")}
        if all(v.values()):
            return "Open MPI v" + ".".join(m.group(1) for m in v.values())
        m = re.search(r'#define\s+MPICH_VERSION\s+"([^"]+)"', text)
        if m:
            return f"MPICH Version: {m.group(1)}"
        return None
    return None


def _same_mpi(header: str, library: str) -> bool:
    """The library version string belongs to the release the header declares."""
    if header.startswith("Open MPI v"):
        # "Open MPI v5.0.11, package: ..." -- the release is followed by a comma
        return library.startswith(header + ",") or library == header
    if header.startswith("MPICH Version: "):
        m = re.search(r"MPICH Version:\s*(\S+)", library)
        return bool(m) and m.group(1) == header.split(": ", 1)[1]
    return False


def _sanitize(version: str) -> str:
    """A library version's first line, in characters safe unescaped in a C string on a command line."""
    line = version.strip("\x00 \n").splitlines()[0] if version.strip("\x00 \n") else ""
    return re.sub(r"[^A-Za-z0-9 .,:;@_+()/-]", "", line)


@functools.lru_cache(maxsize=1)
def extension() -> native.Extension | None:
    """The fast path's native.Extension, or None (``status()`` says why) when it cannot be built
    for mpi4py's MPI. Does not initialize MPI."""
    global _why_no_extension
    try:
        libver = mpienv.library_version()
    except ImportError:
        _why_no_extension = "mpi4py is not installed"
        return None
    mpicc = _mpicc()
    if mpicc is None:
        _why_no_extension = "no MPI compiler wrapper (mpicc) found for mpi4py's MPI; set MPICC"
        return None
    try:
        cflags, ldflags = _wrapper_flags(mpicc)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        _why_no_extension = f"cannot read the flags of {mpicc}: {e}"
        return None
    header = _header_version(cflags)
    if header is None or not _same_mpi(header, libver):
        _why_no_extension = (f"{mpicc}'s mpi.h ({header or 'not found or unknown MPI'}) is not the MPI "
                             f"mpi4py uses ({_sanitize(libver)})")
        return None
    return native.Extension(
        EXT_NAME, (_SOURCE,),
        # The library version is compiled in (and so part of the build key): an
        # MPI upgraded in place gets a fresh build, never a stale one.
        cflags=(*cflags, "-DOMPI_SKIP_MPICXX", "-DMPICH_SKIP_MPICXX",
                f'-DCOMMTRACE_MPI_LIBRARY="{_sanitize(libver)}"'),
        ldflags=tuple(ldflags))


def _module():
    """The loaded extension if this process may use it, else None (why: ``_last_status``)."""
    global _last_status
    if native.mode() == "off":
        _last_status = "python: disabled by COMMTRACE_NATIVE=0"
        return None
    ext = extension()
    if ext is None:
        _last_status = f"python: extension not buildable: {_why_no_extension}"
        return None
    mod = native.load(ext)
    if mod is None:
        _last_status = f"python: {native.error(ext) or 'extension not loaded'}"
        return None
    hit = _probed.get(mod.__name__)
    if hit is None:
        hit = _probed[mod.__name__] = _check_runtime(mod)
    if isinstance(hit, str):
        _last_status = f"python: {hit}"
        return None
    _last_status = "native"
    return mod


def _check_runtime(mod):
    world = mpienv.world()
    MPI = mpienv.mpi_module()
    want = _sanitize(mpienv.library_version())
    if mod.built_for() != want or _sanitize(mod.library_version()) != want:
        return (f"MPI library mismatch: extension built for {mod.built_for()!r}, calls "
                f"{_sanitize(mod.library_version())!r}, mpi4py uses {want!r}")
    if mod.comm_world_handle() != world.handle:
        return "the extension and mpi4py do not share one MPI library instance (COMM_WORLD handles differ)"
    level = mod.thread_level()
    if level != MPI.THREAD_MULTIPLE:
        return (f"MPI thread level is {level}, not MPI_THREAD_MULTIPLE ({MPI.THREAD_MULTIPLE}): "
                "MPI may not be called from the caller's thread while other threads use it")
    return mod


def wrap(pg):
    """The group c10d gets for the Python MPIProcessGroup ``pg``: the native one over it, or ``pg``."""
    mod = _module()
    if mod is None:
        return pg
    ng = mod.NativeMPIProcessGroup(pg, pg.comm.handle)
    profiling.native = mod    # the Python group's profiler events too: async, as c10d's
    # Mirror the backends registered on the Python group (it registers none today:
    # c10d uses it as the group itself) so the wrapper answers torch's per-device
    # lookups (_get_backend, DDP's logger) exactly as the group it stands for.
    for dev in pg._device_types:
        try:
            backend = pg._get_backend(dev)
        except RuntimeError:
            continue
        ng._register_backend(dev, ng.BackendType.MPI, backend)
    if pg.bound_device_id is not None:
        ng.bound_device_id = pg.bound_device_id
    return ng


def status() -> str:
    """"native" when the last mpi group created got the C++ fast path, else "python: <why>"."""
    return _last_status
