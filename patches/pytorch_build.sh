#!/usr/bin/env bash
# Fetch (or reuse), patch and build PyTorch with MPI and commtrace's
# ProcessGroupMPI patch. Called by patches/patch.mk (make patch-check /
# patch-build / patch-revert / patch-prereqs).
#
# usage: patches/pytorch_build.sh {prereqs|fetch|check|apply|prepare|build|revert}
#   prepare = everything build does before the compile (prerequisites, source,
#             submodules, patch, build requirements); build = prepare + compile
#             + install + check.
#
# Settings (environment; patch.mk passes them through):
#   PYTORCH_TAG      release tag the patch is made for             (v2.13.0)
#   PYTORCH_SRC      PyTorch source: a git checkout, or an extracted release
#                    tarball (with submodules); cloned there if missing
#                                                          (build/pytorch-$PYTORCH_TAG)
#   PYTORCH_URL      where to clone from; a local mirror (path or file://) works
#                    offline                 (https://github.com/pytorch/pytorch.git)
#   PYTORCH_OFFLINE  1: never touch the network; a step that would need it stops
#                    with a message instead                        (0)
#   PYTHON           interpreter of the venv to install into        (.venv/bin/python)
#   USE_CUDA         build with CUDA                                (0)
#   MAX_JOBS         parallel compile jobs       (nproc, fewer if RAM is short: see below)
#   MIN_FREE_GB      free disk required where PYTORCH_SRC lives     (30)
# pip takes its usual settings from the environment: PIP_INDEX_URL,
# PIP_FIND_LINKS=/path/to/wheelhouse, PIP_NO_INDEX=1, ...
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTORCH_TAG=${PYTORCH_TAG:-v2.13.0}
PYTORCH_SRC=${PYTORCH_SRC:-build/pytorch-$PYTORCH_TAG}
PYTHON=${PYTHON:-.venv/bin/python}
USE_CUDA=${USE_CUDA:-0}
MIN_FREE_GB=${MIN_FREE_GB:-30}
PYTORCH_URL=${PYTORCH_URL:-https://github.com/pytorch/pytorch.git}
PYTORCH_OFFLINE=${PYTORCH_OFFLINE:-0}
PATCH=${COMMTRACE_PATCH:-$HERE/processgroupmpi_commtrace.patch}
# Compiler floor when the tree's CMakeLists.txt states none; the tree's own
# requirement is read from it (min_gcc_of_tree) once the source is there.
MIN_GCC=9.3
MIN_CMAKE=3.27
GB_PER_JOB=$([ "$USE_CUDA" = 0 ] && echo 2 || echo 3)  # peak RAM of one compile job

case "$PYTHON" in /*) ;; *) PYTHON="$PWD/$PYTHON" ;; esac
case "$PYTORCH_SRC" in /*) ;; *) PYTORCH_SRC="$PWD/$PYTORCH_SRC" ;; esac
# cmake and ninja may come from the venv (PyTorch's requirements.txt installs them).
PATH="$(dirname "$PYTHON"):$PATH"

say() { printf 'commtrace: %s\n' "$*"; }
die() { printf 'commtrace: error: %s\n' "$*" >&2; exit 1; }
ok() { printf '  ok       %-10s %s\n' "$1" "$2"; }
bad() { printf '  MISSING  %-10s %s\n' "$1" "$2"; missing=1; }
note() { printf '  later    %-10s %s\n' "$1" "$2"; }

# version_ge A B: A >= B for dotted versions
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# A network step is about to run: refuse it when offline.
network() {
  [ "$PYTORCH_OFFLINE" = 0 ] || die "PYTORCH_OFFLINE=1 and this step needs the network: $*"
  say "network: $*"
}

is_local_url() {
  case "$PYTORCH_URL" in file://*|/*|./*|../*) return 0 ;; *) [ -d "$PYTORCH_URL" ] ;; esac
}

# Parallel jobs: MAX_JOBS, else the cores, but no more than the memory allows.
max_jobs() {
  if [ -n "${MAX_JOBS:-}" ]; then echo "$MAX_JOBS"; return; fi
  local cores mem_gb jobs
  cores=$(nproc 2>/dev/null || echo 4)
  mem_gb=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo 2>/dev/null || echo 0)
  jobs=$cores
  if [ "$mem_gb" -gt 0 ] && [ $((mem_gb / GB_PER_JOB)) -lt "$jobs" ]; then jobs=$((mem_gb / GB_PER_JOB)); fi
  [ "$jobs" -ge 1 ] || jobs=1
  echo "$jobs"
}

# Prerequisites that do not depend on the source tree, in the order the build
# needs them. cmake and ninja are checked after PyTorch's requirements.txt
# (which installs them into the venv) -- here they are only reported.
prereqs() {
  local v p
  missing=0
  say "checking build prerequisites for PyTorch $PYTORCH_TAG with USE_MPI=1 USE_CUDA=$USE_CUDA"
  if p=$(command -v git); then ok git "$p"; else bad git "not on PATH (needed to apply the patch)"; fi
  for t in mpicc mpicxx; do
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
  compilers "$MIN_GCC"
  if [ -x "$PYTHON" ]; then
    v=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if version_ge "$v" 3.10; then ok python "$v ($PYTHON)"; else bad python "$v: PyTorch $PYTORCH_TAG needs Python >= 3.10"; fi
  else
    bad python "$PYTHON not found (create the venv first: make setup / python3 -m venv .venv)"
  fi
  # Free disk where the checkout lives (or will live).
  local d=$PYTORCH_SRC
  while [ ! -d "$d" ]; do d=$(dirname "$d"); done
  local free_kb; free_kb=$(df -Pk "$d" | awk 'NR==2 {print $4}')
  local free_gb=$((free_kb / 1024 / 1024))
  if [ "$free_gb" -ge "$MIN_FREE_GB" ]; then ok disk "${free_gb} GB free at $d"; else
    bad disk "${free_gb} GB free at $d, need ~${MIN_FREE_GB} GB (set PYTORCH_SRC elsewhere, or MIN_FREE_GB to override)"; fi
  ok jobs "MAX_JOBS=$(max_jobs) (~$GB_PER_JOB GB RAM per job; set MAX_JOBS to change)"
  if [ "$USE_CUDA" != 0 ]; then
    if p=$(command -v nvcc); then ok nvcc "$p"; else bad nvcc "USE_CUDA=$USE_CUDA but nvcc is not on PATH (set CUDA_HOME / PATH)"; fi
  fi
  build_tools note
  [ "$missing" = 0 ] || die "missing prerequisites (see above)"
  say "prerequisites ok"
}

# gcc/g++ >= $1 and able to compile C++20 (the torch 2.13 wheel is built as C++20).
compilers() {
  local want=$1 v t
  for t in gcc g++; do
    if command -v "$t" >/dev/null; then
      v=$("$t" -dumpfullversion -dumpversion 2>/dev/null | head -n1)
      if version_ge "$v" "$want"; then ok "$t" "$v (>= $want)"; else bad "$t" "$v is older than $want"; fi
    else
      bad "$t" "not on PATH (need gcc/g++ >= $want)"
    fi
  done
  if command -v g++ >/dev/null; then
    if printf '#include <concepts>\n#include <span>\nconstexpr int f(std::integral auto x) { return x; }\nint main() { std::span<int> s; return f(0) + int(s.size()); }\n' |
        g++ -std=c++20 -x c++ -fsyntax-only - 2>/dev/null; then ok "c++20" "g++ -std=c++20 compiles concepts and <span>"
    else bad "c++20" "g++ cannot compile C++20 (concepts, <span>): PyTorch $PYTORCH_TAG is built as C++20"; fi
  fi
}

# cmake >= MIN_CMAKE and ninja; $1 = ok/bad reporter for a missing one.
build_tools() {
  local report=${1:-bad} v p
  if command -v cmake >/dev/null; then
    v=$(cmake --version | head -n1 | awk '{print $3}')
    if version_ge "$v" "$MIN_CMAKE"; then ok cmake "$v ($(command -v cmake))"; else
      "$report" cmake "$v is older than $MIN_CMAKE (PyTorch's requirements.txt installs a newer one into the venv)"; fi
  else
    "$report" cmake "not on PATH (PyTorch's requirements.txt installs it into the venv)"
  fi
  if p=$(command -v ninja); then ok ninja "$(ninja --version) ($p)"; else
    "$report" ninja "not on PATH (PyTorch's requirements.txt installs it into the venv)"; fi
}

# The compiler floor the tree's CMakeLists.txt enforces for GNU (else MIN_GCC).
min_gcc_of_tree() {
  local v
  v=$(grep -E 'GNU.*CMAKE_CXX_COMPILER_VERSION +VERSION_LESS +[0-9.]+' "$PYTORCH_SRC/CMakeLists.txt" 2>/dev/null |
      sed -E 's/.*VERSION_LESS +([0-9.]+).*/\1/' | sort -V | tail -n1 || true)
  echo "${v:-$MIN_GCC}"
}

tree_version() { tr -d ' \n' < "$PYTORCH_SRC/version.txt" 2>/dev/null || true; }

# Does the tree's version.txt match the tag (2.13.0, 2.13.0a0, 2.13.0+...)?
version_matches() {
  local v want=${PYTORCH_TAG#v}
  v=$(tree_version)
  case "$v" in "$want"|"$want"a*|"$want"+*|"$want"rc*) return 0 ;; *) return 1 ;; esac
}

# The source tree: reuse a checkout or an extracted tarball at PYTORCH_SRC;
# clone only when there is nothing there.
fetch() {
  if [ ! -e "$PYTORCH_SRC" ] || [ -z "$(ls -A "$PYTORCH_SRC" 2>/dev/null)" ]; then
    is_local_url || network "git clone $PYTORCH_URL"
    say "cloning PyTorch $PYTORCH_TAG from $PYTORCH_URL into $PYTORCH_SRC"
    mkdir -p "$(dirname "$PYTORCH_SRC")"
    git clone --depth 1 --branch "$PYTORCH_TAG" --no-recurse-submodules "$PYTORCH_URL" "$PYTORCH_SRC"
  fi
  [ -f "$PYTORCH_SRC/torch/csrc/distributed/c10d/ProcessGroupMPI.cpp" ] ||
    die "$PYTORCH_SRC is not a PyTorch source tree (no torch/csrc/distributed/c10d/ProcessGroupMPI.cpp); point PYTORCH_SRC at one or at an empty directory"
  if [ ! -e "$PYTORCH_SRC/.git" ]; then
    version_matches || die "$PYTORCH_SRC is PyTorch '$(tree_version)' (version.txt); the patch is made for $PYTORCH_TAG"
    say "using the source tree at $PYTORCH_SRC (no .git: a release tarball), version $(tree_version)"
    return
  fi
  local want head
  if want=$(git -C "$PYTORCH_SRC" rev-parse -q --verify "refs/tags/$PYTORCH_TAG^{commit}"); then
    head=$(git -C "$PYTORCH_SRC" rev-parse HEAD)
    if [ "$head" != "$want" ]; then
      say "checking out $PYTORCH_TAG in $PYTORCH_SRC"
      git -C "$PYTORCH_SRC" checkout "$PYTORCH_TAG" ||
        die "cannot check out $PYTORCH_TAG in $PYTORCH_SRC (local changes?)"
    fi
  elif version_matches; then
    say "no tag $PYTORCH_TAG in $PYTORCH_SRC; version.txt says $(tree_version): using the checkout as it is"
  else
    network "git fetch of tag $PYTORCH_TAG (the checkout has neither the tag nor a matching version.txt)"
    git -C "$PYTORCH_SRC" fetch --depth 1 origin "refs/tags/$PYTORCH_TAG:refs/tags/$PYTORCH_TAG"
    git -C "$PYTORCH_SRC" checkout "$PYTORCH_TAG" ||
      die "cannot check out $PYTORCH_TAG in $PYTORCH_SRC (local changes?)"
  fi
}

# Submodule paths (.gitmodules) whose directory is missing or empty.
missing_submodules() {
  [ -f "$PYTORCH_SRC/.gitmodules" ] || return 0
  git config -f "$PYTORCH_SRC/.gitmodules" --get-regexp '^submodule\..*\.path$' | while read -r _ path; do
    [ -n "$(ls -A "$PYTORCH_SRC/$path" 2>/dev/null)" ] || echo "$path"
  done
}

submodules() {
  local missing_list n
  missing_list=$(missing_submodules)
  if [ -z "$missing_list" ]; then say "submodules present"; return; fi
  n=$(printf '%s\n' "$missing_list" | wc -l)
  [ -e "$PYTORCH_SRC/.git" ] ||
    die "$n submodule(s) missing in $PYTORCH_SRC (e.g. $(printf '%s\n' "$missing_list" | head -n3 | tr '\n' ' ')); use a release tarball that includes them (pytorch-$PYTORCH_TAG.tar.gz) or a checkout with submodules"
  network "git submodule update ($n missing, ~1-2 GB the first time)"
  git -C "$PYTORCH_SRC" submodule sync --recursive
  git -C "$PYTORCH_SRC" submodule update --init --recursive --depth 1 --jobs 8 ||
    git -C "$PYTORCH_SRC" submodule update --init --recursive --jobs 8
}

# git in the source tree. A tree without .git (a tarball) may lie inside some
# other repository (build/ of this one): the ceiling keeps git from finding
# that one, whose root would change what the patch's paths mean.
in_tree() { (cd "$PYTORCH_SRC" && GIT_CEILING_DIRECTORIES="$(dirname "$PYTORCH_SRC")" git "$@"); }

# Prints "applies", "applied" or "conflict".
patch_state() {
  if in_tree apply --check "$PATCH" 2>/dev/null; then echo applies
  elif in_tree apply --reverse --check "$PATCH" 2>/dev/null; then echo applied
  else echo conflict; fi
}

check() {
  fetch
  case $(patch_state) in
    applies) say "patch applies cleanly to $PYTORCH_SRC ($PYTORCH_TAG)" ;;
    applied) say "patch is already applied in $PYTORCH_SRC" ;;
    *) in_tree apply --check -v "$PATCH" || true
       die "patch does not apply to $PYTORCH_SRC; it is made for PyTorch $PYTORCH_TAG" ;;
  esac
}

apply_patch() {
  case $(patch_state) in
    applies) in_tree apply "$PATCH"; say "patch applied" ;;
    applied) say "patch already applied" ;;
    *) in_tree apply --check -v "$PATCH" || true
       die "patch does not apply to $PYTORCH_SRC; it is made for PyTorch $PYTORCH_TAG" ;;
  esac
}

revert() {
  [ -f "$PYTORCH_SRC/torch/csrc/distributed/c10d/ProcessGroupMPI.cpp" ] || die "no PyTorch source tree at $PYTORCH_SRC"
  case $(patch_state) in
    applied) in_tree apply --reverse "$PATCH"
             say "patch reverted in $PYTORCH_SRC; the installed torch keeps it until you rebuild or run make patch-uninstall" ;;
    applies) say "patch is not applied in $PYTORCH_SRC; nothing to do" ;;
    *) die "cannot tell whether the patch is applied in $PYTORCH_SRC (the file differs from both versions)" ;;
  esac
}

# Are all of requirements.txt's requirements installed in the venv? (Then pip
# is not run at all.)
requirements_met() {
  "$PYTHON" - "$PYTORCH_SRC/requirements.txt" <<'PY' 2>/dev/null
import sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    if line.startswith("-"):
        sys.exit(1)  # -r/-c/--index-url ...: let pip decide
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate():
        continue
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if not req.specifier.contains(version, prereleases=True):
        sys.exit(1)
PY
}

requirements() {
  local req="$PYTORCH_SRC/requirements.txt"
  [ -f "$req" ] || { say "no requirements.txt in $PYTORCH_SRC"; return; }
  if requirements_met; then
    say "PyTorch's build requirements are already installed"
  else
    say "installing PyTorch's build requirements into $(dirname "$(dirname "$PYTHON")") (pip's settings apply: PIP_FIND_LINKS, PIP_NO_INDEX, PIP_INDEX_URL)"
    "$PYTHON" -m pip install -r "$req"
  fi
}

# Everything before the compile.
prepare() {
  prereqs
  fetch
  missing=0
  say "compiler for this tree (its CMakeLists.txt wants GCC >= $(min_gcc_of_tree))"
  compilers "$(min_gcc_of_tree)"
  [ "$missing" = 0 ] || die "the compiler is too old for $PYTORCH_SRC (see above)"
  submodules
  apply_patch
  requirements
  missing=0
  build_tools bad
  [ "$missing" = 0 ] || die "cmake >= $MIN_CMAKE and ninja are needed (see above): $PYTHON -m pip install 'cmake>=$MIN_CMAKE' ninja"
}

build() {
  prepare
  local jobs; jobs=$(max_jobs)
  say "building PyTorch $PYTORCH_TAG with USE_MPI=1 USE_CUDA=$USE_CUDA MAX_JOBS=$jobs (30 min to several hours)"
  (
    cd "$PYTORCH_SRC"
    export USE_MPI=1 USE_DISTRIBUTED=1 USE_CUDA="$USE_CUDA" BUILD_TEST=0 MAX_JOBS="$jobs"
    if [ "$USE_CUDA" = 0 ]; then export USE_ROCM=0 USE_XPU=0 USE_NCCL=0; fi
    export PYTORCH_BUILD_VERSION="${PYTORCH_BUILD_VERSION:-${PYTORCH_TAG#v}+mpi.commtrace}" PYTORCH_BUILD_NUMBER=0
    export CMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-$("$PYTHON" -c 'import sys; print(sys.prefix)')}"
    # --no-deps: torch's runtime dependencies are already in the venv (the stock wheel's)
    "$PYTHON" -m pip install --no-build-isolation --no-deps -v .
  )
  "$PYTHON" - <<'PY' || die "the installed torch has no MPI support (see above)"
import sys
import torch, torch.distributed as dist
if not dist.is_mpi_available():
    sys.exit(f"commtrace: torch {torch.__version__} in this venv was built without MPI")
print("commtrace: installed torch", torch.__version__, "with MPI")
PY
}

case "${1:-}" in
  prereqs) prereqs ;;
  fetch) fetch ;;
  check) check ;;
  apply) fetch; apply_patch ;;
  prepare) prepare ;;
  build) build ;;
  revert) revert ;;
  *) echo "usage: $0 {prereqs|fetch|check|apply|prepare|build|revert}" >&2; exit 2 ;;
esac
