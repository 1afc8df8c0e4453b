#!/usr/bin/env python3
"""Keep the PyTorch patch in sync with patches/commtrace_trace.h.

The patch adds commtrace_trace.h to the PyTorch tree as
torch/csrc/distributed/c10d/CommtraceTrace.hpp. This script rewrites that
new-file section of the patch from the header (the ProcessGroupMPI.cpp section
is edited by hand), so the tested header and the patched one are the same.

    python patches/make_patch.py          # rewrite the patch
    python patches/make_patch.py --check  # exit 1 if it is out of date
"""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER = HERE / "commtrace_trace.h"
PATCH = HERE / "processgroupmpi_commtrace.patch"
TREE_HEADER = "torch/csrc/distributed/c10d/CommtraceTrace.hpp"


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def header_section(text: str) -> str:
    """A ``git diff`` new-file section for TREE_HEADER with ``text``."""
    if not text.endswith("\n"):
        raise ValueError("header must end with a newline")
    lines = text.splitlines()
    out = [
        f"diff --git a/{TREE_HEADER} b/{TREE_HEADER}",
        "new file mode 100644",
        f"index 0000000..{git_blob_id(text.encode())[:7]}",
        "--- /dev/null",
        f"+++ b/{TREE_HEADER}",
        f"@@ -0,0 +1,{len(lines)} @@",
    ]
    out += ["+" + ln for ln in lines]
    return "\n".join(out) + "\n"


def split_sections(patch: str) -> list[str]:
    """The per-file sections of a git patch, each starting with ``diff --git``."""
    starts = [m.start() for m in re.finditer(r"^diff --git ", patch, flags=re.M)]
    return [patch[a:b] for a, b in zip(starts, starts[1:] + [len(patch)])]


def build(patch: str, header_text: str) -> str:
    sections = split_sections(patch)
    new = header_section(header_text)
    out = [new if s.startswith(f"diff --git a/{TREE_HEADER} ") else s for s in sections]
    if new not in out:
        out.insert(0, new)
    return "".join(out)


def main(argv: list[str]) -> int:
    current = PATCH.read_text()
    wanted = build(current, HEADER.read_text())
    if "--check" in argv:
        if wanted != current:
            print(f"{PATCH.name} is out of date; run python patches/make_patch.py", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        PATCH.write_text(wanted)
        print(f"updated {PATCH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
