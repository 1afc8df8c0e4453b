#!/usr/bin/env python3
"""Keep the PyTorch patch in sync with the headers it adds.

The patch adds patches/commtrace_trace.h to the PyTorch tree as
torch/csrc/distributed/c10d/CommtraceTrace.hpp, and next to it
commtrace_record.h (the record layout, generated from commtrace/trace/schema.py
by commtrace/trace/record_header.py; CommtraceTrace.hpp includes it by that
name). This script rewrites those new-file sections of the patch from the
files here (the ProcessGroupMPI.cpp section is edited by hand), so the tested
headers and the patched ones are the same.

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
RECORD_HEADER = HERE / "commtrace_record.h"
PATCH = HERE / "processgroupmpi_commtrace.patch"
TREE_HEADER = "torch/csrc/distributed/c10d/CommtraceTrace.hpp"
TREE_RECORD_HEADER = "torch/csrc/distributed/c10d/commtrace_record.h"
# (file here, its path in the PyTorch tree), in the order the patch lists them
ADDED_FILES = ((HEADER, TREE_HEADER), (RECORD_HEADER, TREE_RECORD_HEADER))


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def header_section(text: str, tree_path: str = TREE_HEADER) -> str:
    """A ``git diff`` new-file section for ``tree_path`` with ``text``."""
    if not text.endswith("\n"):
        raise ValueError("header must end with a newline")
    lines = text.splitlines()
    out = [
        f"diff --git a/{tree_path} b/{tree_path}",
        "new file mode 100644",
        f"index 0000000..{git_blob_id(text.encode())[:7]}",
        "--- /dev/null",
        f"+++ b/{tree_path}",
        f"@@ -0,0 +1,{len(lines)} @@",
    ]
    out += ["+" + ln for ln in lines]
    return "\n".join(out) + "\n"


def split_sections(patch: str) -> list[str]:
    """The per-file sections of a git patch, each starting with ``diff --git``."""
    starts = [m.start() for m in re.finditer(r"^diff --git ", patch, flags=re.M)]
    return [patch[a:b] for a, b in zip(starts, starts[1:] + [len(patch)])]


def build(patch: str, added: dict[str, str]) -> str:
    """``patch`` with a new-file section for each tree path -> text of ``added``
    (replacing the section the patch has for that path, else prepended)."""
    out = split_sections(patch)
    for i, (tree_path, text) in enumerate(added.items()):
        new = header_section(text, tree_path)
        at = [j for j, s in enumerate(out) if s.startswith(f"diff --git a/{tree_path} ")]
        if at:
            out[at[0]] = new
        else:
            out.insert(i, new)
    return "".join(out)


def added_files() -> dict[str, str]:
    return {tree: here.read_text() for here, tree in ADDED_FILES}


def main(argv: list[str]) -> int:
    current = PATCH.read_text()
    wanted = build(current, added_files())
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
