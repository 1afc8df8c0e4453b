# commtrace's ProcessGroupMPI patch: included by the top-level Makefile
# (`include patches/patch.mk`), or used alone: make -f patches/patch.mk patch-check
#
#   make patch-check     [PYTORCH_SRC=dir]   git apply --check against a source tree
#                                             (cloned at $(PYTORCH_TAG) if missing)
#   make patch-build     [PYTORCH_SRC=dir] [USE_CUDA=1] [MAX_JOBS=n] [PYTORCH_OFFLINE=1]
#                                             check prerequisites, reuse the source tree
#                                             (checkout or extracted release tarball) or
#                                             clone it (PYTORCH_URL: a local mirror works),
#                                             apply the patch (idempotent), install the
#                                             build requirements (pip's usual settings:
#                                             PIP_FIND_LINKS=wheelhouse PIP_NO_INDEX=1),
#                                             build with USE_MPI=1 and install into $(VENV)
#   make patch-prepare   [...]               patch-build without the compile
#   make patch-revert    [PYTORCH_SRC=dir]   take the patch out of the source tree
#   make patch-uninstall                     put the stock torch wheel back into $(VENV)
#   make patch-prereqs                       only print/check the prerequisites
#
# Time, disk and offline use: patches/README.md.

VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
PYTORCH_TAG ?= v2.13.0
PYTORCH_SRC ?= build/pytorch-$(PYTORCH_TAG)
USE_CUDA ?= 0
MIN_FREE_GB ?= 30
PYTORCH_OFFLINE ?= 0
# The stock wheel patch-uninstall reinstalls (the top-level Makefile sets it too).
TORCH_PIN ?= torch==$(patsubst v%,%,$(PYTORCH_TAG))

COMMTRACE_PATCH_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
COMMTRACE_PATCH_SH = PYTORCH_TAG='$(PYTORCH_TAG)' PYTORCH_SRC='$(PYTORCH_SRC)' \
	PYTHON='$(PYTHON)' USE_CUDA='$(USE_CUDA)' MIN_FREE_GB='$(MIN_FREE_GB)' \
	PYTORCH_OFFLINE='$(PYTORCH_OFFLINE)' \
	$(if $(MAX_JOBS),MAX_JOBS='$(MAX_JOBS)') \
	$(if $(PYTORCH_URL),PYTORCH_URL='$(PYTORCH_URL)') \
	bash $(COMMTRACE_PATCH_DIR)/pytorch_build.sh

.PHONY: patch-check patch-build patch-prepare patch-revert patch-uninstall patch-prereqs

patch-check:
	$(COMMTRACE_PATCH_SH) check

patch-build:
	$(COMMTRACE_PATCH_SH) build

patch-prepare:
	$(COMMTRACE_PATCH_SH) prepare

patch-revert:
	$(COMMTRACE_PATCH_SH) revert

# The stock wheel from the same index / wheelhouse pip used for `make setup`
# (pip's own configuration and PIP_* variables); --no-deps: its dependencies
# are already there.
patch-uninstall:
	$(PYTHON) -m pip install --force-reinstall --no-deps '$(TORCH_PIN)'

patch-prereqs:
	$(COMMTRACE_PATCH_SH) prereqs
