"""Rewrite docs/img's screenshots of the HTML report (headless Chromium via tests/cdp.py).

    make demo && .venv/bin/python docs/img/make_screenshots.py

html-report.png: `make demo`'s page (commtrace-out/demo) as it opens: steady steps.
html-report-gpu.png: a GPU-like synthetic run (1 rank, a 280 ms set-up op as NCCL's
first collective, end times observed by polling as gloo on CUDA records them).
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from cdp import Browser  # noqa: E402
from synthetic import write_synthetic_run  # noqa: E402


def page_of(run_dir: str, out: str) -> str:
    subprocess.run([sys.executable, "-m", "commtrace", "report", run_dir, "--html", out, "-q"], check=True, cwd=ROOT)
    return out


def shoot(b: Browser, html: str, png: str, height: int) -> None:
    page = b.open("file://" + os.path.abspath(html), offline=True)
    page.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": height, "deviceScaleFactor": 1,
                                                     "mobile": False})
    page.wait_for("document.body.getAttribute('data-ready') === '1'", timeout=60)
    page.evaluate("window.dispatchEvent(new Event('resize'))")
    time.sleep(1.0)                                   # plotly's resize is debounced
    page.screenshot(png)
    print("wrote", png)


def main() -> None:
    with tempfile.TemporaryDirectory() as d, Browser(timeout=120) as b:
        demo = os.path.join(ROOT, "commtrace-out", "demo")
        shoot(b, page_of(demo, os.path.join(d, "demo.html")), os.path.join(HERE, "html-report.png"), 1250)
        gpu = write_synthetic_run(os.path.join(d, "gpu"), ranks=1, ops_per_rank=60, seed=3, setup_ns=280e6,
                                  end_observed=True)
        shoot(b, page_of(gpu, os.path.join(d, "gpu.html")), os.path.join(HERE, "html-report-gpu.png"), 1250)


if __name__ == "__main__":
    main()
