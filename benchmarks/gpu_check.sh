#!/usr/bin/env bash
# The GPU check, in one run on a lent GPU machine (its python3 holds torch + CUDA +
# NCCL; no mpirun, no downloads): builds the C++ extensions for that torch, runs
# tests/gpu, then bench_cuda.py with the wrapper `commtrace run` picks (native when
# built) and with the Python wrapper, each naming the wrapper it measured.
#     OUT=dir bash benchmarks/gpu_check.sh        (about 4-6 minutes on one H100/H200)
# With little device time left, the DDP-step ratio alone: builds only the native
# wrapper, then bench_cuda.py's DDP cases with many blocks (about 2 minutes):
#     ONLY=ddp DDP_REPS=161 OUT=dir bash benchmarks/gpu_check.sh
# The whole test suite on that machine's torch, CUDA present, with pytest-xdist over its
# cores (5-7 minutes; -v names each test as it ends, so a cut-off run still says which
# failed): Open MPI and mpi4py wheels for its Python carried in .whl/
# (pip download, see the device tool's notes) give it an mpirun; the checkout is made
# importable and autostarted as an editable install would (no build backend is needed):
#     ONLY=suite OUT=dir bash benchmarks/gpu_check.sh      (carry .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check-out}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# builds go where `commtrace run` children look for them too (inside the Python environment)
{ nvidia-smi -L; $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'; } 2>&1 | tee "$OUT/env.txt"
if [ "${ONLY:-}" = ddp ]; then
  { time timeout 150 $PY -c 'from commtrace import native; from commtrace.capture.native_wrapper import EXTENSION; print(native.build(EXTENSION))'; } 2>&1 | tail -5 | tee "$OUT/build.txt"
  timeout 150 $PY benchmarks/bench_cuda.py --ddp-only --ddp-reps "${DDP_REPS:-81}" --json "$OUT/bench-ddp.json" 2>&1 | tee "$OUT/bench-ddp.txt"
  exit
fi
{ time $PY -m commtrace build-native; } 2>&1 | tee "$OUT/build.txt"
if [ "${ONLY:-}" = suite ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile .whl/*.whl 2>&1 | tail -3
  site=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD" > "$site/__editable__.commtrace.pth"   # sorts before the autostart .pth
  cp commtrace/capture/commtrace-autostart.pth "$site/"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  timeout "${SUITE_S:-420}" $PY -m pytest -v --tb=short -rfEs -p no:cacheprovider -n "${JOBS:-14}" --dist loadfile \
    --durations=15 tests --ignore=tests/compat 2>&1 | tee "$OUT/suite.txt"
  exit
fi
timeout 300 $PY -m pytest -q -rs -p no:cacheprovider tests/gpu 2>&1 | tee "$OUT/tests-gpu.txt"
for w in auto python; do
  timeout 150 $PY benchmarks/bench_cuda.py --reps 9 --wrapper $w --json "$OUT/bench-$w.json" 2>&1 | tee "$OUT/bench-$w.txt"
done
