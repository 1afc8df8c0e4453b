"""Run a script as __main__ after commtrace.mpi.install(): what `commtrace run`
does for the mpi backend, without the tracer. Usage: run_with_install.py SCRIPT ARGS..."""
import runpy
import sys

import commtrace.mpi

commtrace.mpi.install()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
