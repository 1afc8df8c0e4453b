"""Benchmark `commtrace report --html`: time to write the page, its size, and the
time headless Chromium takes to load and draw it.

    python benchmarks/bench_html.py [--demo-ops 2000] [--big-ranks 8] [--big-ops 125000] [--json out.json]

First the page of a run the size of `make demo`'s (2 ranks x 13 ops, synthetic),
against its budgets (issue 33: <= 1.5 MB, loaded in <= 1 s in headless Chromium),
side by side with the same page carrying the full plotly.min.js (what the page
inlined before the partial bundle), alternating rounds: the load-time ratio.
Then three synthetic DDP-like runs (tests/synthetic.py): a demo-sized one (2 ranks; larger
than `make demo`'s), the largest whose timeline draws every op (html_figures.
TIMELINE_MAX_OPS, 8 ranks) and one of about 1 M ops (8 ranks x 125,000, aggregated). Per run: `commtrace report
RUN --html FILE -q` as a fresh subprocess (wall time: read, analyse, write), the
page's size, and, when a Chromium is installed, the time from navigating to the
file:// URL (network disabled) until the page's script has drawn every figure
(tests/cdp.py: DevTools Protocol over a pipe, no port).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

DEMO_BUDGET_S = 2.0        # issue 19: HTML for the demo run
LOAD_BUDGET_S = 10.0       # issue 19: a 1 M-op page loads in headless Chromium
SIZE_BUDGET_BYTES = 12 * 2**20   # documented in docs/report.md (plotly.js alone is 4.6 MiB)
PAGE_BUDGET_BYTES = 1_500_000    # issue 33: the page of `make demo`'s run
PAGE_LOAD_BUDGET_S = 1.0         # issue 33: ... loaded and drawn in headless Chromium
DEMO_RUN_OPS = 13                # ops per rank of `make demo`'s run (examples/ddp_mpi.py, 2 epochs)


def write_page(run_dir: str, out: str) -> float:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "commtrace", "report", run_dir, "--html", out, "-q"],
                       capture_output=True, text=True, env=env, timeout=600)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout).strip().splitlines()[-1])
    return dt


@contextlib.contextmanager
def _browser(given):
    """``given`` (a started tests/cdp.py Browser: the bench smoke test opens every page in
    one, a Chromium start costing ~2 s of CPU), else a Browser of its own."""
    if given is not None:
        yield given
        return
    from cdp import Browser
    with Browser(timeout=120) as b:
        yield b


def load_in_chromium(path: str, browser=None) -> dict:
    from cdp import find_chromium
    if find_chromium() is None:
        return {"available": False, "reason": "no Chromium installed"}
    with _browser(browser) as b:
        t = time.perf_counter()
        page = b.open("file://" + os.path.abspath(path), offline=True)
        page.wait_for("document.body.getAttribute('data-ready') === '1'", timeout=120)
        dt = time.perf_counter() - t
        problems = page.problems()
    return {"available": True, "load_s": dt, "problems": problems}


def _with_full_plotly(html: str) -> str | None:
    """The same page with the full plotly.min.js of the plotly package (if installed)."""
    import re
    from importlib import resources
    try:
        full = resources.files("plotly").joinpath("package_data", "plotly.min.js").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    m = re.search(r"<script>/\*\*\n\* plotly\.js \(basic - minified\).*?</script>", html, re.S)
    return html[:m.start()] + "<script>" + re.sub(r"</(script)", r"<\\/\1", full, flags=re.I) + "</script>" + \
        html[m.end():] if m else None


def bench_page(d: str, rounds: int = 5, browser=None) -> dict:
    """`make demo`-sized page: size, and load time (median of ``rounds``) against the
    same page with the full plotly.js, alternating."""
    from cdp import find_chromium
    from synthetic import write_synthetic_run
    run_dir = write_synthetic_run(os.path.join(d, "page"), ranks=2, ops_per_rank=DEMO_RUN_OPS, seed=3, slow_rank=1)
    out = os.path.join(d, "page.html")
    res = {"ranks": 2, "ops": 2 * DEMO_RUN_OPS, "write_s": write_page(run_dir, out), "bytes": os.path.getsize(out),
           "budget_bytes": PAGE_BUDGET_BYTES, "budget_load_s": PAGE_LOAD_BUDGET_S}
    with open(out, encoding="utf-8") as f:
        full = _with_full_plotly(f.read())
    pages = {"page": out}
    if full is not None:
        pages["full_plotly"] = os.path.join(d, "page-full.html")
        with open(pages["full_plotly"], "w", encoding="utf-8") as f:
            f.write(full)
        res["full_plotly_bytes"] = os.path.getsize(pages["full_plotly"])
    if find_chromium() is None:
        res["chromium"] = {"available": False, "reason": "no Chromium installed"}
        return res
    times: dict = {k: [] for k in pages}
    problems: list = []
    with _browser(browser) as b:
        b.open("about:blank")                     # the browser's own start-up is not the page's
        for _ in range(rounds):
            for k, path in pages.items():
                t = time.perf_counter()
                page = b.open("file://" + os.path.abspath(path), offline=True)
                page.wait_for("document.body.getAttribute('data-ready') === '1'", timeout=120)
                times[k].append(time.perf_counter() - t)
                problems += page.problems()
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    res["chromium"] = {"available": True, "load_s": med["page"], "runs_s": times["page"], "problems": problems}
    if "full_plotly" in med:
        res["chromium"]["full_plotly_load_s"] = med["full_plotly"]
        res["chromium"]["ratio"] = med["page"] / med["full_plotly"]
    return res


def bench_run(label: str, ranks: int, ops_per_rank: int, d: str, browser=None) -> dict:
    from synthetic import write_synthetic_run
    run_dir = write_synthetic_run(os.path.join(d, label), ranks=ranks, ops_per_rank=ops_per_rank, seed=3,
                                  slow_rank=1)
    out = os.path.join(d, label + ".html")
    res = {"ranks": ranks, "ops": ranks * ops_per_rank, "write_s": write_page(run_dir, out),
           "bytes": os.path.getsize(out)}
    res["chromium"] = load_in_chromium(out, browser)
    return res


def run(demo_ops: int = 2000, big_ranks: int = 8, big_ops: int = 125_000, page_rounds: int = 5,
        browser=None, limit_ops: int | None = None) -> dict:
    """``browser``: a started Browser to open every page in (default: one per page); ``limit_ops``:
    the ops of the "limit" run, all ranks (default html_figures.TIMELINE_MAX_OPS, the most the
    timeline draws op by op; the bench smoke test, which checks only that each case runs, passes
    a few hundred: at the limit it cost about a third of the whole smoke test)."""
    with tempfile.TemporaryDirectory() as d:
        from commtrace.render.html_figures import TIMELINE_MAX_OPS
        limit_ops = TIMELINE_MAX_OPS if limit_ops is None else limit_ops
        return {"page": bench_page(d, page_rounds, browser), "demo": bench_run("demo", 2, demo_ops, d, browser),
                "limit": bench_run("limit", big_ranks, limit_ops // big_ranks, d, browser),
                "big": bench_run("big", big_ranks, big_ops, d, browser),
                "budgets": {"demo_write_s": DEMO_BUDGET_S, "big_load_s": LOAD_BUDGET_S,
                            "big_bytes": SIZE_BUDGET_BYTES, "page_bytes": PAGE_BUDGET_BYTES,
                            "page_load_s": PAGE_LOAD_BUDGET_S}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo-ops", type=int, default=2000)
    ap.add_argument("--big-ranks", type=int, default=8)
    ap.add_argument("--big-ops", type=int, default=125_000)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run(a.demo_ops, a.big_ranks, a.big_ops)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
