#!/usr/bin/env bash
# Fetch, patch and build PyTorch with MPI and commtrace's ProcessGroupMPI patch.
# Called by patches/patch.mk (make patch-check / patch-build / patch-revert).
#
# usage: patches/pytorch_build.sh {prereqs|fetch|check|apply|build|revert}
#
# Settings (environment; patch.mk passes them through):
#   PYTORCH_TAG   release tag the patch is made for           (v2.13.0)
#   PYTORCH_SRC   PyTorch checkout; cloned there if missing    (build/pytorch-$PYTORCH_TAG)
#   PYTHON        interpreter of the venv to install into      (.venv/bin/python)
#   USE_CUDA      build with CUDA                              (0)
#   MAX_JOBS      parallel compile jobs (~2 GB RAM each)       (nproc)
#   MIN_FREE_GB   free disk required where PYTORCH_SRC lives   (30)
#   PYTORCH_URL   where to clone from                          (https://github.com/pytorch/pytorch.git)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTORCH_TAG=${PYTORCH_TAG:-v2.13.0}
PYTORCH_SRC=${PYTORCH_SRC:-build/pytorch-$PYTORCH_TAG}
PYTHON=${PYTHON:-.venv/bin/python}
USE_CUDA=${USE_CUDA:-0}
MAX_JOBS=${MAX_JOBS:-$(nproc 2>/dev/null || echo 4)}
MIN_FREE_GB=${MIN_FREE_GB:-30}
PYTORCH_URL=${PYTORCH_URL:-https://github.com/pytorch/pytorch.git}
PATCH=${COMMTRACE_PATCH:-$HERE/processgroupmpi_commtrace.patch}
MIN_GCC=9.4
MIN_CMAKE=3.27

case "$PYTHON" in /*) ;; *) PYTHON="$PWD/$PYTHON" ;; esac
case "$PYTORCH_SRC" in /*) ;; *) PYTORCH_SRC="$PWD/$PYTORCH_SRC" ;; esac
# cmake and ninja may come from the venv (pip install cmake ninja).
PATH="$(dirname "$PYTHON"):$PATH"

say() { printf 'commtrace: %s\n' "$*"; }
die() { printf 'commtrace: error: %s\n' "$*" >&2; exit 1; }

# version_ge A B: A >= B for dotted versions
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

prereqs() {
  local missing=0 v p
  say "checking build prerequisites for PyTorch $PYTORCH_TAG with USE_MPI=1 USE_CUDA=$USE_CUDA"
  ok() { printf '  ok       %-10s %s\n' "$1" "$2"; }
  bad() { printf '  MISSING  %-10s %s\n' "$1" "$2"; missing=1; }

  for t in git mpicc mpicxx; do
    if p=$(command -v "$t"); then ok "$t" "$p"; else
      bad "$t" "not on PATH: install an MPI with its compiler wrappers (Debian/Ubuntu: apt install libopenmpi-dev openmpi-bin; or load your cluster's MPI module)"
    fi
  done
  if command -v mpicc >/dev/null; then
    local tmp; tmp=$(mktemp -d)
    printf '#include <mpi.h>\nint main(void) { return MPI_VERSION > 0 ? 0 : 1; }\n' > "$tmp/t.c"
    if mpicc -c "$tmp/t.c" -o "$tmp/t.o" 2>"$tmp/err"; then
      ok "mpi.h" "$(mpicc -showme:incdirs 2>/dev/null || mpicc -show 2>/dev/null | tr ' ' '\n' | grep '^-I' | tr '\n' ' ' || true)"
    else
      bad "mpi.h" "mpicc cannot compile '#include <mpi.h>': $(head -n 3 "$tmp/err" | tr '\n' ' ')"
    fi
    rm -rf "$tmp"
  else
    bad "mpi.h" "cannot check without mpicc"
  fi
  for t in gcc g++; do
    if command -v "$t" >/dev/null; then
      v=$("$t" -dumpfullversion -dumpversion 2>/dev/null | head -n1)
      if version_ge "$v" "$MIN_GCC"; then ok "$t" "$v"; else bad "$t" "$v is older than $MIN_GCC (PyTorch needs a C++17 compiler, gcc >= $MIN_GCC)"; fi
    else
      bad "$t" "not on PATH (need gcc/g++ >= $MIN_GCC)"
    fi
  done
  if command -v cmake >/dev/null; then
    v=$(cmake --version | head -n1 | awk '{print $3}')
    if version_ge "$v" "$MIN_CMAKE"; then ok cmake "$v ($(command -v cmake))"; else
      bad cmake "$v is older than $MIN_CMAKE: $PYTHON -m pip install 'cmake>=$MIN_CMAKE'"; fi
  else
    bad cmake "not on PATH: $PYTHON -m pip install 'cmake>=$MIN_CMAKE'"
  fi
  if p=$(command -v ninja); then ok ninja "$(ninja --version) ($p)"; else bad ninja "not on PATH: $PYTHON -m pip install ninja"; fi
  if [ -x "$PYTHON" ]; then
    v=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if version_ge "$v" 3.10; then ok python "$v ($PYTHON)"; else bad python "$v: PyTorch $PYTORCH_TAG needs Python >= 3.10"; fi
  else
    bad python "$PYTHON not found (create the venv first: make venv / python3 -m venv .venv)"
  fi
  # Free disk where the checkout lives (or will live).
  local d=$PYTORCH_SRC
  while [ ! -d "$d" ]; do d=$(dirname "$d"); done
  local free_kb; free_kb=$(df -Pk "$d" | awk 'NR==2 {print $4}')
  local free_gb=$((free_kb / 1024 / 1024))
  if [ "$free_gb" -ge "$MIN_FREE_GB" ]; then ok disk "${free_gb} GB free at $d"; else
    bad disk "${free_gb} GB free at $d, need ~${MIN_FREE_GB} GB (set PYTORCH_SRC elsewhere, or MIN_FREE_GB to override)"; fi
  if [ "$USE_CUDA" != 0 ]; then
    if p=$(command -v nvcc); then ok nvcc "$p"; else bad nvcc "USE_CUDA=$USE_CUDA but nvcc is not on PATH (set CUDA_HOME / PATH)"; fi
  fi
  [ "$missing" = 0 ] || die "missing prerequisites (see above)"
  say "prerequisites ok"
}

fetch() {
  if [ ! -d "$PYTORCH_SRC/.git" ]; then
    say "cloning PyTorch $PYTORCH_TAG into $PYTORCH_SRC (shallow)"
    mkdir -p "$(dirname "$PYTORCH_SRC")"
    git clone --depth 1 --branch "$PYTORCH_TAG" --no-recurse-submodules "$PYTORCH_URL" "$PYTORCH_SRC"
  fi
  [ -f "$PYTORCH_SRC/torch/csrc/distributed/c10d/ProcessGroupMPI.cpp" ] ||
    die "$PYTORCH_SRC is not a PyTorch checkout (no torch/csrc/distributed/c10d/ProcessGroupMPI.cpp)"
  local want head
  if ! want=$(git -C "$PYTORCH_SRC" rev-parse -q --verify "refs/tags/$PYTORCH_TAG^{commit}"); then
    say "fetching tag $PYTORCH_TAG"
    git -C "$PYTORCH_SRC" fetch --depth 1 origin "refs/tags/$PYTORCH_TAG:refs/tags/$PYTORCH_TAG"
    want=$(git -C "$PYTORCH_SRC" rev-parse "refs/tags/$PYTORCH_TAG^{commit}")
  fi
  head=$(git -C "$PYTORCH_SRC" rev-parse HEAD)
  if [ "$head" != "$want" ]; then
    say "checking out $PYTORCH_TAG in $PYTORCH_SRC"
    git -C "$PYTORCH_SRC" checkout "$PYTORCH_TAG" ||
      die "cannot check out $PYTORCH_TAG in $PYTORCH_SRC (local changes?)"
  fi
}

submodules() {
  say "updating submodules (this downloads ~1-2 GB the first time)"
  git -C "$PYTORCH_SRC" submodule sync --recursive
  git -C "$PYTORCH_SRC" submodule update --init --recursive --depth 1 --jobs 8 ||
    git -C "$PYTORCH_SRC" submodule update --init --recursive --jobs 8
}

# Prints "applies", "applied" or "conflict".
patch_state() {
  if git -C "$PYTORCH_SRC" apply --check "$PATCH" 2>/dev/null; then echo applies
  elif git -C "$PYTORCH_SRC" apply --reverse --check "$PATCH" 2>/dev/null; then echo applied
  else echo conflict; fi
}

check() {
  fetch
  case $(patch_state) in
    applies) say "patch applies cleanly to $PYTORCH_SRC ($PYTORCH_TAG)" ;;
    applied) say "patch is already applied in $PYTORCH_SRC" ;;
    *) git -C "$PYTORCH_SRC" apply --check -v "$PATCH" || true
       die "patch does not apply to $PYTORCH_SRC; it is made for PyTorch $PYTORCH_TAG" ;;
  esac
}

apply_patch() {
  case $(patch_state) in
    applies) git -C "$PYTORCH_SRC" apply "$PATCH"; say "patch applied" ;;
    applied) say "patch already applied" ;;
    *) git -C "$PYTORCH_SRC" apply --check -v "$PATCH" || true
       die "patch does not apply to $PYTORCH_SRC; it is made for PyTorch $PYTORCH_TAG" ;;
  esac
}

revert() {
  [ -d "$PYTORCH_SRC/.git" ] || die "no checkout at $PYTORCH_SRC"
  case $(patch_state) in
    applied) git -C "$PYTORCH_SRC" apply --reverse "$PATCH"
             say "patch reverted in $PYTORCH_SRC; the installed torch still has it until you rebuild or reinstall torch" ;;
    applies) say "patch is not applied in $PYTORCH_SRC; nothing to do" ;;
    *) die "cannot tell whether the patch is applied in $PYTORCH_SRC (the file differs from both versions)" ;;
  esac
}

build() {
  prereqs
  fetch
  submodules
  apply_patch
  say "installing PyTorch's build requirements into $(dirname "$(dirname "$PYTHON")")"
  "$PYTHON" -m pip install -r "$PYTORCH_SRC/requirements.txt"
  say "building PyTorch $PYTORCH_TAG with USE_MPI=1 USE_CUDA=$USE_CUDA MAX_JOBS=$MAX_JOBS (30 min to several hours)"
  (
    cd "$PYTORCH_SRC"
    export USE_MPI=1 USE_DISTRIBUTED=1 USE_CUDA="$USE_CUDA" BUILD_TEST=0 MAX_JOBS="$MAX_JOBS"
    if [ "$USE_CUDA" = 0 ]; then export USE_ROCM=0 USE_XPU=0 USE_NCCL=0; fi
    export PYTORCH_BUILD_VERSION="${PYTORCH_BUILD_VERSION:-${PYTORCH_TAG#v}+mpi.commtrace}" PYTORCH_BUILD_NUMBER=0
    export CMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-$("$PYTHON" -c 'import sys; print(sys.prefix)')}"
    "$PYTHON" -m pip install --no-build-isolation -v .
  )
  "$PYTHON" - <<'EOF'
import torch, torch.distributed as dist
assert dist.is_mpi_available(), "torch was built without MPI"
print("commtrace: installed torch", torch.__version__, "with MPI")
EOF
}

case "${1:-}" in
  prereqs) prereqs ;;
  fetch) fetch ;;
  check) check ;;
  apply) fetch; apply_patch ;;
  build) build ;;
  revert) revert ;;
  *) echo "usage: $0 {prereqs|fetch|check|apply|build|revert}" >&2; exit 2 ;;
esac
