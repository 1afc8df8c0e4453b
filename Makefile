# commtrace: the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PYTHON = $(VENV)/bin/python
PY ?= python3
# The torch this project is tested against. A range that admits newer torch
# would download a multi-GB CUDA build; this pin installs the local CPU wheel.
TORCH_PIN ?= torch==2.13.0
# `make test TORCH=2.x.y` (and demo, setup, bench): that torch, in its own venv.
# pip's config on this project's machines caps torch at the releases on their
# disk; the cap is lifted for that venv's installs only.
TORCH ?=
ifneq ($(strip $(TORCH)),)
VENV := .venv-torch$(TORCH)
TORCH_PIN := torch==$(TORCH)
PIP_ENV := PIP_CONSTRAINT=/dev/null
endif
# make test-compat: the smoke suite on the oldest, a middle and the newest supported
# release (commtrace/torch_compat.py: SUPPORTED): tests/compat, and the tests elsewhere
# whose subject is a release difference (they run in make test too).
COMPAT_TORCH ?= 2.4.1 2.11.0 2.15.0
SMOKE = tests/compat tests/capture/test_blocking_calls.py
NP ?= 2
# Open MPI refuses to run as root without these; set for this project's commands only.
MPI_ENV = OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN = $(MPI_ENV) $(VENV)/bin/mpirun --oversubscribe
STAMP = $(VENV)/.commtrace-installed
DEMO_DIR ?= commtrace-out/demo

.PHONY: setup native demo test test-smoke test-compat bench clean help
help:
	@echo "make demo   - set up if needed, trace examples/ddp_mpi.py under mpirun ($(NP) ranks), print the report, write it as HTML"
	@echo "make test   - set up if needed, run the whole test suite (TORCH=2.x.y: against that torch, in .venv-torch2.x.y)"
	@echo "make test-compat - the smoke suite ($(SMOKE)) on torch $(COMPAT_TORCH), each in its own venv"
	@echo "make bench  - run the benchmarks and rewrite BENCHMARKS.md"
	@echo "make setup  - create $(VENV) and install commtrace (editable) with its extras"
	@echo "make native - compile the optional C++ fast paths (setup, demo, test and bench run it)"

setup: $(STAMP) native

# Compiles only what changed (builds are keyed by source, flags and torch
# version); a failed build leaves commtrace on its Python code paths.
native: $(STAMP)
	@$(PYTHON) -m commtrace build-native || echo "commtrace: C++ fast paths not built; using the Python code paths"

$(STAMP): setup.cfg pyproject.toml commtrace/_install_pth.py commtrace/capture/commtrace-autostart.pth
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PIP_ENV) $(PYTHON) -m pip install -q --upgrade pip
	$(PIP_ENV) $(PYTHON) -m pip install -q "$(TORCH_PIN)"
	$(PIP_ENV) $(PYTHON) -m pip install -q -e ".[mpi,native,scale,html,test]" "$(TORCH_PIN)"
	touch $(STAMP)

demo: setup
	rm -rf $(DEMO_DIR)
	$(MPIRUN) -n $(NP) $(PYTHON) -m commtrace run -o $(DEMO_DIR) examples/ddp_mpi.py --hidden 1000 --epochs 2
	$(VENV)/bin/commtrace report $(DEMO_DIR) --html $(DEMO_DIR)/report.html
	@echo "commtrace: HTML report written to $(DEMO_DIR)/report.html (open it in a browser; it needs no network)"

# tests/compat (the smoke suite) runs in test-compat, on other torch releases; on the
# pin the rest of the suite covers the same paths in more detail.
# TEST_JOBS pytest-xdist workers, each running whole test files (--dist loadfile: a file's
# fixtures are made once): on 2 cores one test's launcher importing torch alone, or its
# ranks' rendezvous, leaves a core to the other's. Files start longest first, by their measured
# seconds (tests/file_seconds.json; COMMTRACE_TEST_FILE_SECONDS=PATH records a run's, see
# tests/conftest.py), so the run does not end on one long file. TEST_JOBS=0: one process, in
# that order. Every port a test run uses comes from tests/helpers.free_port (outside the kernel's
# ephemeral range, each worker its own): three whole runs in a row with two workers were clean
# (BENCHMARKS.md, "Test time", ports4). TEST_JOBS ?= 2 is the default.
TEST_JOBS ?= 2
test: setup
	$(MPI_ENV) $(PYTHON) -m pytest -q -rs -p no:cacheprovider --durations=25 -n $(TEST_JOBS) --dist loadfile \
	  tests --ignore=tests/compat

test-smoke: setup
	$(MPI_ENV) $(PYTHON) -m pytest -q -rs -p no:cacheprovider $(SMOKE)

# COMPAT_CLEAN=1 (CI) removes each release's venv after its run: each holds a CUDA
# build of about 6 GB, and a CI machine's disk may not hold two at once.
COMPAT_CLEAN ?= 0
test-compat:
	@set -e; for v in $(COMPAT_TORCH); do \
	  echo "== torch $$v"; $(MAKE) --no-print-directory test-smoke TORCH=$$v; \
	  if [ "$(COMPAT_CLEAN)" = 1 ]; then rm -rf .venv-torch$$v; fi; done

bench: setup
	$(PYTHON) benchmarks/run_all.py --output BENCHMARKS.md

clean:
	rm -rf commtrace-out build *.egg-info .pytest_cache

-include patches/patch.mk
