"""``commtrace build-native``: compile the optional C++ fast paths."""
from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("build-native", help="compile the optional C++ fast paths",
                       description="Compile commtrace's optional C++ extensions for the installed torch: the "
                       "native wrapper for CPU groups, the analysis kernels (report, compare, check) and, when "
                       "mpi4py's MPI has headers, the mpi backend's fast path. Without them commtrace uses its Python code (slower per op). Exit code 1 "
                       "if one failed to build.",
                       epilog="example:\n  commtrace build-native\n\nCOMMTRACE_NATIVE=0 disables the "
                       "extensions at run time; COMMTRACE_NATIVE_DIR sets where they are built.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="print the compiler command lines")
    p.set_defaults(handler=run_build_native)


def run_build_native(ns) -> int:
    import time

    from .. import native
    failed = 0
    for label, ext in native.extensions():
        if ext is None:
            print(f"{label}: skipped (nothing to build it with here)")
            continue
        t = time.monotonic()
        try:
            path = native.build(ext, verbose=ns.verbose)
        except native.NativeBuildError as e:
            print(f"{label}: not built: {e}")
            failed += 1
            continue
        print(f"{label}: {path} ({time.monotonic() - t:.0f} s)")
    return 1 if failed else 0
