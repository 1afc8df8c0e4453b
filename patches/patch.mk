# commtrace's ProcessGroupMPI patch: included by the top-level Makefile
# (`include patches/patch.mk`), or used alone: make -f patches/patch.mk patch-check
#
#   make patch-check  [PYTORCH_SRC=dir]   git apply --check against a checkout
#                                          (cloned at $(PYTORCH_TAG) if missing)
#   make patch-build  [PYTORCH_SRC=dir] [USE_CUDA=1] [MAX_JOBS=n]
#                                          check prerequisites, clone/checkout the
#                                          tag with submodules, apply the patch
#                                          (idempotent), build with USE_MPI=1 and
#                                          install into $(VENV)
#   make patch-revert [PYTORCH_SRC=dir]   take the patch out of the checkout
#   make patch-prereqs                     only print/check the prerequisites
#
# Time and disk needs: patches/README.md.

VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
PYTORCH_TAG ?= v2.13.0
PYTORCH_SRC ?= build/pytorch-$(PYTORCH_TAG)
USE_CUDA ?= 0
MIN_FREE_GB ?= 30

COMMTRACE_PATCH_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
COMMTRACE_PATCH_SH = PYTORCH_TAG='$(PYTORCH_TAG)' PYTORCH_SRC='$(PYTORCH_SRC)' \
	PYTHON='$(PYTHON)' USE_CUDA='$(USE_CUDA)' MIN_FREE_GB='$(MIN_FREE_GB)' \
	$(if $(MAX_JOBS),MAX_JOBS='$(MAX_JOBS)') \
	bash $(COMMTRACE_PATCH_DIR)/pytorch_build.sh

.PHONY: patch-check patch-build patch-revert patch-prereqs

patch-check:
	$(COMMTRACE_PATCH_SH) check

patch-build:
	$(COMMTRACE_PATCH_SH) build

patch-revert:
	$(COMMTRACE_PATCH_SH) revert

patch-prereqs:
	$(COMMTRACE_PATCH_SH) prereqs
