"""Build and load commtrace's optional C++ extensions, each with a pure-Python fallback.

Why C++: a Python ``ProcessGroup``'s per-op cost (pybind trampoline, GIL, bytecode) is most
of commtrace's added latency. Extensions are built ahead of time (``commtrace build-native``,
run by ``make setup``) and only *loaded* at run time, keyed by sources (and headers next to
them), flags, Python and torch versions: a job never waits for a compiler nor loads a stale
binary. Each package declares its own in a ``native_ext.py`` whose ``extensions()`` returns
``[(label, Extension or None)]`` (None: cannot be built here); this module knows none.
Torch-using ones are built by ``torch.utils.cpp_extension`` (it owns the flags that must
match torch) in a fresh folder moved into place atomically; it is never imported to *load*
(setuptools: ~0.3-0.9 s). Others: the C++ compiler alone.

``COMMTRACE_NATIVE``: ``0`` never use them; unset or ``1`` use them when built; ``build``
also compile missing ones on first use. ``COMMTRACE_NATIVE_DIR``: where builds live
(default ``<sys.prefix>/var/commtrace-native``, else ``~/.cache``).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from . import env_vars

HERE = os.path.dirname(os.path.abspath(__file__))
DECLARATION_MODULE = "native_ext"  # a module of this name declares a package's extensions
# The one header of torch-release differences (``#include "torch_compat.h"``), on the
# include path of every extension that uses torch.
TORCH_COMPAT_HEADER = os.path.join(HERE, "torch_compat.h")
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
    # False: the module uses no torch symbol (plain CPython API; linked --as-needed so
    # it does not need libtorch), so loading it imports no torch (~1 s per process)
    uses_torch: bool = True


# Our flags on top of cpp_extension's (which compiles without optimization).
_CFLAGS = ("-O2", "-Wno-unused-parameter")


def mode() -> str:
    m = os.environ.get("COMMTRACE_NATIVE", "1").strip().lower()
    return {"0": "off", "off": "off", "no": "off", "false": "off", "build": "build"}.get(m, "on")


def build_dir() -> str:
    d = os.environ.get("COMMTRACE_NATIVE_DIR")
    if d:
        return os.path.abspath(d)
    d = os.path.join(sys.prefix, "var", "commtrace-native")
    with contextlib.suppress(OSError):
        os.makedirs(d, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    return os.path.join(os.path.expanduser("~"), ".cache", "commtrace", "native")


@functools.lru_cache(maxsize=None)
def _paths(ext: Extension) -> tuple[str, str]:
    """(module name, path of its shared object); cached: every group a process creates asks."""
    h = hashlib.sha256()
    for s in _inputs(ext):
        with open(s, "rb") as f:
            h.update(f.read())
    h.update(repr((ext.compiler, ext.cflags, ext.ldflags, *_torch_install(),
                   sys.version_info[:2], _CFLAGS, _BUILD_VERSION)).encode())
    modname = f"{ext.name}_{h.hexdigest()[:16]}"
    return modname, os.path.join(build_dir(), modname + ".so")


@functools.lru_cache(maxsize=None)
def _torch_install() -> tuple[str, str]:
    """(torch's version, its folder), from its metadata where there is one (no torch import)."""
    with contextlib.suppress(ImportError, ValueError):   # PackageNotFoundError is an ImportError
        import importlib.metadata
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.origin:
            return importlib.metadata.version("torch"), os.path.dirname(spec.origin)
    import torch
    return torch.__version__, os.path.dirname(torch.__file__)


_BUILD_VERSION = 3  # bump when how build() compiles changes (2: cpp_extension; 3: plain builds of no-torch ones)


def _inputs(ext: Extension) -> list[str]:
    """The files a build of ``ext`` reads: its sources and every header in their folders."""
    paths = [os.path.join(HERE, s) for s in ext.sources]
    for d in sorted({os.path.dirname(p) for p in paths}):
        paths += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".h"))
    if ext.uses_torch:
        paths.append(TORCH_COMPAT_HEADER)
    return paths


def build(ext: Extension, verbose: bool = False) -> str:
    """Compile ``ext`` (if not built yet); returns the path of the shared object."""
    modname, so = _paths(ext)
    if os.path.exists(so):
        return so
    os.makedirs(os.path.dirname(so), exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{modname}.", dir=os.path.dirname(so))
    try:
        built = _compile(ext, modname, work, verbose)
        os.replace(built, so)  # atomic: a concurrent loader sees all or nothing
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return so


def _compile(ext: Extension, modname: str, work: str, verbose: bool) -> str:
    """Build ``ext`` as ``modname`` in the empty folder ``work``; the .so's path."""
    if not ext.uses_torch:
        return _compile_plain(ext, modname, work, verbose)
    try:
        from torch.utils import cpp_extension
    except ImportError as e:
        raise NativeBuildError(f"torch.utils.cpp_extension is not usable: {e}") from None
    # cpp_extension writes flags into a ninja file that a shell runs: quoted
    # here, a flag with spaces or quotes (the mpi fast path's -D...="...") stays one.
    quoted = functools.partial(map, shlex.quote)
    # PATH with this environment's ninja first, also when the venv is not activated
    dirs = [os.path.dirname(sys.executable)]
    with contextlib.suppress(ImportError, AttributeError):
        import ninja
        dirs.insert(0, ninja.BIN_DIR)
    path = os.pathsep.join([*dirs, os.environ.get("PATH", "")])
    try:    # cpp_extension reads PATH and CXX from the environment
        with env_vars.setting({"PATH": path, "CXX": shlex.join(ext.compiler)}):
            built = cpp_extension.load(
                name=modname, sources=[os.path.join(HERE, s) for s in ext.sources],
                extra_cflags=[*quoted(_CFLAGS), *quoted(ext.cflags)], extra_ldflags=[*quoted(ext.ldflags)],
                extra_include_paths=[shlex.quote(HERE)], build_directory=work,
                with_cuda=False, is_python_module=False, is_standalone=False, verbose=verbose)
        # torch < 2.5 returns None (it loads the library instead); every release writes it there.
        return built or os.path.join(work, modname + ".so")
    except (RuntimeError, OSError, ValueError) as e:
        raise NativeBuildError(f"compiling {ext.name} failed: {_diagnostics(str(e))}") from None


def _compile_plain(ext: Extension, modname: str, work: str, verbose: bool) -> str:
    """Build an extension that uses no torch with the compiler alone: cpp_extension links
    libc10, which some releases (2.6) keep despite --as-needed (it would need torch loaded)."""
    import sysconfig

    out = os.path.join(work, modname + ".so")
    cmd = [*ext.compiler, *_CFLAGS, "-std=c++17", "-shared", "-fPIC", f"-DTORCH_EXTENSION_NAME={modname}",
           f"-I{sysconfig.get_paths()['include']}", *ext.cflags,
           *(os.path.join(HERE, s) for s in ext.sources), "-o", out, *ext.ldflags]
    if verbose:
        print(shlex.join(cmd), file=sys.stderr)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NativeBuildError(f"compiling {ext.name} failed: {e}") from None
    if r.returncode != 0:
        raise NativeBuildError(f"compiling {ext.name} failed: {_diagnostics(r.stderr)}")
    return out


def _diagnostics(text: str) -> str:
    """The compiler's first error lines out of cpp_extension's message, on one line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    picked = [ln for ln in lines if "error:" in ln] or [ln for ln in lines if "error" in ln.lower()
                                                        and not ln.startswith("Error building")] or lines[-3:]
    return " | ".join(ln[:300] for ln in picked[:3])


def load(ext: Extension):
    """The extension's module, or None (``error(ext)`` says why)."""
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
        if ext.uses_torch:
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
    """(label, extension or None) of every declared extension; a declaring package that cannot
    be imported here (a missing optional dependency) is skipped."""
    out = []
    for modname in _declaration_modules():
        try:
            declared = importlib.import_module(modname).extensions()
        except ImportError:
            continue
        out += [(label, ext) for label, ext in declared]
    return out


def _declaration_modules() -> list[str]:
    """Dotted names of the package's ``native_ext`` modules, in path order."""
    package = __name__.rsplit(".", 1)[0]
    found = []
    for d, subdirs, files in os.walk(HERE):
        subdirs[:] = sorted(x for x in subdirs if not x.startswith((".", "_")))
        if DECLARATION_MODULE + ".py" in files:
            rel = os.path.relpath(d, HERE)
            found.append(".".join([package, *([] if rel == "." else rel.split(os.sep)), DECLARATION_MODULE]))
    return sorted(found)


def error(ext: Extension) -> str | None:
    """Why ``load(ext)`` returned None (None if it did not)."""
    e = _loaded.get(ext.name)
    return f"{type(e).__name__}: {e}" if isinstance(e, Exception) else None
