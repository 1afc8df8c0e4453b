"""Every relative link in README.md and docs/*.md names a file that exists and, with
#anchor, a heading of that file (GitHub's anchors: lower case, punctuation dropped,
spaces to hyphens, a -N suffix for repeats)."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(path):
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    seen, out = {}, set()
    for title in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(path):
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    text = re.sub(r"`[^`\n]*`", "", text)
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            bad.append(f"{target}: no file {os.path.relpath(dest, ROOT)}")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {os.path.relpath(dest, ROOT)}")
    return bad


def test_readme_and_docs_links_resolve():
    docs = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    bad = [f"{os.path.relpath(p, ROOT)}: {b}" for p in docs for b in broken_links(p)]
    assert bad == []


def test_checker_sees_a_broken_anchor(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Title one\n\n## Two, three\n\n[ok](#two-three) [bad](#nope) [gone](b.md)\n")
    assert broken_links(str(doc)) == ["#nope: no heading #nope in " + os.path.relpath(str(doc), ROOT),
                                      "b.md: no file " + os.path.relpath(str(tmp_path / "b.md"), ROOT)]
