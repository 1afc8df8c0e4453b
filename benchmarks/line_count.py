"""Lines of the package's Python files, split into code / docstring / comment / blank (tokenize).

    python benchmarks/line_count.py                       # commtrace/**/*.py of this tree
    python benchmarks/line_count.py --against REV         # and of git revision REV, per changed file
    python benchmarks/line_count.py commtrace/render      # a part of the tree

A line is code when a token other than a comment or a docstring is on it (a string continued over
several lines, or a bracket's continuation lines, are code lines); docstring when it is part of a
string that is a statement of its own; comment when a comment is all it holds; else blank.
Issue 31 counts ``wc -l`` of commtrace/**/*.py; this says which kind of line a change removed.
"""
from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tokenize
from pathlib import Path

KINDS = ("code", "docstring", "comment", "blank")
_LAYOUT = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def line_kinds(text: str) -> dict:
    """Counts of KINDS over the lines of Python source ``text``."""
    kind: dict = {}
    prev = None
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for i, t in enumerate(tokens):
        lines = range(t.start[0], t.end[0] + 1)
        if t.type == tokenize.COMMENT:
            kind.setdefault(t.start[0], "comment")
            continue
        if t.type in _LAYOUT:
            prev = t if t.type != tokenize.NL else prev
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        statement = prev is None or prev.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        if t.type == tokenize.STRING and statement and after is not None and after.type in _LAYOUT[:2]:
            for n in lines:
                kind.setdefault(n, "docstring")
        else:
            kind.update((n, "code") for n in lines)
        prev = t
    out = dict.fromkeys(KINDS, 0)
    for n, line in enumerate(text.splitlines(), 1):
        out[kind.get(n, "code" if line.strip() else "blank")] += 1
    return out


def tree_counts(root: Path, paths: list[str], rev: str | None = None) -> dict:
    """path -> line_kinds of every .py file under ``paths`` (in the work tree, or at git ``rev``)."""
    if rev is None:
        files = sorted(p for d in paths for p in (root / d).rglob("*.py"))
        return {str(p.relative_to(root)): line_kinds(p.read_text(encoding="utf-8")) for p in files}
    listed = subprocess.run(["git", "-C", str(root), "ls-tree", "-r", "--name-only", rev, "--", *paths],
                            check=True, capture_output=True, text=True).stdout.split()
    show = lambda f: subprocess.run(["git", "-C", str(root), "show", f"{rev}:{f}"], check=True,  # noqa: E731
                                    capture_output=True, text=True).stdout
    return {f: line_kinds(show(f)) for f in listed if f.endswith(".py")}


def total(counts: dict) -> dict:
    return {k: sum(c[k] for c in counts.values()) for k in KINDS}


def _row(name: str, c: dict, sign: str = "") -> str:
    return f"{name:<56}" + "".join(f" {v:>{sign}10,}" for v in [*(c[k] for k in KINDS), sum(c.values())])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=["commtrace"], help="folders of the tree (default: commtrace)")
    ap.add_argument("--against", metavar="REV", help="also count git revision REV: per changed file, before -> after")
    ns = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    now = tree_counts(root, ns.paths)
    print(f"{'':<56}" + "".join(f" {k:>10}" for k in (*KINDS, "total")))
    if ns.against:
        then = tree_counts(root, ns.paths, ns.against)
        for f in sorted(set(now) | set(then)):
            a, b = then.get(f, dict.fromkeys(KINDS, 0)), now.get(f, dict.fromkeys(KINDS, 0))
            if a != b:
                print(_row(f, {k: b[k] - a[k] for k in KINDS}, "+"))
        print(_row(f"total at {ns.against}", total(then)))
    print(_row("total now", total(now)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
