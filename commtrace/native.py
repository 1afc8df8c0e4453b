"""Build and load commtrace's optional C++ extensions (no ninja, no setuptools).

Why C++ at all: the per-op cost of a Python ``ProcessGroup`` (pybind
trampoline, GIL, Python bytecode on cold caches) is most of commtrace's added
latency and of the mpi backend's overhead on small ops. Each extension has a
pure-Python fallback, so commtrace works wherever nothing can be compiled.

Extensions are compiled ahead of time (``commtrace build-native``, which
``make setup`` runs) and only *loaded* at run time: a traced job never waits
for a compiler. Each build is keyed by its sources, flags, Python and torch
versions, so a changed torch never loads a stale binary.

``COMMTRACE_NATIVE``: ``0`` never use the extensions; unset or ``1`` use them
when built; ``build`` also compile missing ones on first use (seconds to a
minute, under a lock-free atomic rename: concurrent ranks may each compile).
``COMMTRACE_NATIVE_DIR``: where builds live (default: inside the Python
environment, ``<sys.prefix>/var/commtrace-native``, else ``~/.cache``).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
_loaded: dict = {}  # build key -> module (or the exception that stopped it)


class NativeBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Extension:
    """One C++ extension: ``name`` is its stem; sources are relative to the package."""
    name: str
    sources: tuple[str, ...]
    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    compiler: tuple[str, ...] = field(default_factory=lambda: tuple(shlex.split(os.environ.get("CXX", "c++"))))


def mode() -> str:
    m = os.environ.get("COMMTRACE_NATIVE", "1").strip().lower()
    return {"0": "off", "off": "off", "no": "off", "false": "off", "build": "build"}.get(m, "on")


def build_dir() -> str:
    d = os.environ.get("COMMTRACE_NATIVE_DIR")
    if d:
        return os.path.abspath(d)
    d = os.path.join(sys.prefix, "var", "commtrace-native")
    try:
        os.makedirs(d, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    return os.path.join(os.path.expanduser("~"), ".cache", "commtrace", "native")


def _torch_flags() -> tuple[list[str], list[str]]:
    import torch
    from torch.utils import cpp_extension as ce
    inc = [sysconfig.get_paths()["include"], *ce.include_paths()]
    cflags = [f"-I{d}" for d in inc] + [
        "-O2", "-fPIC", "-std=c++20", "-DTORCH_API_INCLUDE_EXTENSION_H",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        "-Wno-unused-parameter",
    ]
    try:
        cflags += ce._get_pybind11_abi_build_flags()  # must match torch's, or pybind cannot see its types
    except Exception:
        pass
    libdirs = ce.library_paths()
    ldflags = [f"-L{d}" for d in libdirs] + [f"-Wl,-rpath,{d}" for d in libdirs] + [
        "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]
    return cflags, ldflags


@functools.lru_cache(maxsize=None)
def _paths(ext: Extension) -> tuple[str, str]:
    """(module name, path of its shared object). Cheap: loading must not import
    torch.utils.cpp_extension (it imports setuptools: ~0.3 s per rank). Cached:
    every group a process creates asks, and the sources do not change under it."""
    import torch
    h = hashlib.sha256()
    for s in _inputs(ext):
        with open(s, "rb") as f:
            h.update(f.read())
    h.update(repr((ext.compiler, ext.cflags, ext.ldflags, torch.__version__, os.path.dirname(torch.__file__),
                   sys.version_info[:2], _flags_version)).encode())
    modname = f"{ext.name}_{h.hexdigest()[:16]}"
    return modname, os.path.join(build_dir(), modname + ".so")


_flags_version = 1  # bump when _torch_flags changes


def _inputs(ext: Extension) -> list[str]:
    """The files a build of ``ext`` reads: its sources and every header (``*.h``)
    in their folders, which the sources include."""
    paths = [os.path.join(HERE, s) for s in ext.sources]
    for d in sorted({os.path.dirname(p) for p in paths}):
        paths += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".h"))
    return paths


def build(ext: Extension, verbose: bool = False) -> str:
    """Compile ``ext`` (if not built yet); returns the path of the shared object."""
    modname, so = _paths(ext)
    if os.path.exists(so):
        return so
    cflags, ldflags = _torch_flags()
    os.makedirs(os.path.dirname(so), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(so))
    os.close(fd)
    cmd = [*ext.compiler, "-shared", *cflags, *ext.cflags, f"-DTORCH_EXTENSION_NAME={modname}",
           *[os.path.join(HERE, s) for s in ext.sources], "-o", tmp, *ldflags, *ext.ldflags]
    if verbose:
        print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        os.unlink(tmp)
        raise NativeBuildError(f"cannot run the C++ compiler {ext.compiler[0]!r}: {e}") from None
    if r.returncode != 0:
        os.unlink(tmp)
        lines = [ln for ln in r.stderr.splitlines() if "error" in ln] or r.stderr.splitlines()[-5:]
        raise NativeBuildError(f"compiling {ext.name} failed: " + " | ".join(lines[:3]))
    os.replace(tmp, so)  # atomic: a concurrent loader sees all or nothing
    return so


def load(ext: Extension):
    """The extension's module, or None: not built (and mode is not ``build``),
    disabled, or it failed to build or import (``error(ext)`` says why)."""
    if mode() == "off":
        return None
    try:
        modname, so = _paths(ext)
    except Exception as e:  # no torch headers in this install, ...
        _loaded[ext.name] = e
        return None
    hit = _loaded.get(modname)
    if hit is not None:
        return None if isinstance(hit, Exception) else hit
    try:
        if not os.path.exists(so):
            if mode() != "build":
                _loaded[ext.name] = NativeBuildError(f"{ext.name} is not built (commtrace build-native)")
                return None
            build(ext)
        import torch.distributed  # noqa: F401  (registers the pybind base types the module derives from)
        loader = importlib.machinery.ExtensionFileLoader(modname, so)
        spec = importlib.util.spec_from_file_location(modname, so, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except Exception as e:
        _loaded[modname] = _loaded[ext.name] = e
        return None
    _loaded[modname] = mod
    return mod


def extensions() -> list[tuple[str, Extension | None]]:
    """(label, extension) of every extension commtrace has; None where one
    cannot be built on this machine (e.g. MPI without headers)."""
    from .capture import native_wrapper
    out = [("native wrapper", native_wrapper.EXTENSION)]
    try:
        from .mpi import native_extension
    except ImportError:
        return out
    try:
        out.append(("mpi fast path", native_extension()))
    except Exception:
        out.append(("mpi fast path", None))
    return out


def error(ext: Extension) -> str | None:
    """Why ``load(ext)`` returned None (None if it did not)."""
    e = _loaded.get(ext.name)
    return f"{type(e).__name__}: {e}" if isinstance(e, Exception) else None
