#!/usr/bin/env bash
# The GPU DDP-step ratio alone, for a lent GPU machine with little device time left:
# builds only the native wrapper, then bench_cuda.py's DDP cases with many blocks.
#     OUT=dir bash benchmarks/gpu_ddp_ratio.sh        (about 2 minutes on one H100/H200)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check-out}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ nvidia-smi -L; $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } 2>&1 | tee "$OUT/env.txt"
{ time timeout 150 $PY -c 'from commtrace import native; from commtrace.capture.native_wrapper import EXTENSION; print(native.build(EXTENSION))'; } 2>&1 | tail -5 | tee "$OUT/build.txt"
timeout 150 $PY benchmarks/bench_cuda.py --ddp-only --ddp-reps ${DDP_REPS:-81} --json "$OUT/bench-ddp.json" 2>&1 | tee "$OUT/bench-ddp.txt"
