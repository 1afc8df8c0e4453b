"""The partitioned report (analysis.partial + render.partitioned) prints what the
one-frame report prints: the banner, and (as they are added) the other parts."""
import os

import pytest

from commtrace.analysis.partial import analyse
from commtrace.analysis.report import build_report
from commtrace.analysis.run_info import load_report_run
from commtrace.cli import main
from commtrace.trace.synthetic import write_synthetic_run


def _report(run, *extra) -> str:
    import io
    import contextlib
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["report", str(run), "--width", "160", *extra])
    return out.getvalue()


def _banner(text: str) -> list[str]:
    """The banner lines (up to the first blank line), less the partitioned report's own "analysis" row."""
    lines = text.split("\n\n", 1)[0].splitlines()
    return [ln for ln in lines if not ln.startswith("  analysis ")]


@pytest.fixture(scope="module")
def odd_runs(tmp_path_factory):
    """A rank missing and two hosts; a file cut mid-record (failed and in-flight ops come with both)."""
    base = tmp_path_factory.mktemp("odd")
    missing = write_synthetic_run(str(base / "missing"), ranks=5, ops_per_rank=400, seed=7, p2p=True,
                                  missing_ranks=(2,), hosts=2)
    torn = write_synthetic_run(str(base / "torn"), ranks=3, ops_per_rank=400, seed=8, p2p=True)
    f = os.path.join(torn, next(x for x in os.listdir(torn) if x.startswith("rank1.") and x.endswith(".ops.bin")))
    os.truncate(f, os.path.getsize(f) - 32 * 50 - 7)
    return {"missing": missing, "torn": torn}


def test_banner_equals_one_frame(syn_run, real_run, accum_run, odd_runs):
    for run in (syn_run, real_run, accum_run, *odd_runs.values()):
        one_frame, partitioned = _report(run), _report(run, "--partitioned")
        assert "  analysis   partitioned (" in partitioned
        assert _banner(partitioned) == _banner(one_frame), run
        assert any(ln.startswith("  comm share ") for ln in _banner(one_frame))


def test_banner_numbers_equal_run_info(syn_run, real_run, odd_runs):
    for run in (syn_run, real_run, odd_runs["torn"]):
        info = build_report(load_report_run(run)).info
        s = analyse(run, workers=1)
        for k in ("wall_ns", "span_ns", "t0_ns", "ops", "bytes", "failed", "in_flight", "ranks", "world_size",
                  "hosts", "backends", "command", "clocks", "incomplete_ranks", "comm_share_per_rank",
                  "comm_share", "run_id"):
            assert s.info[k] == info[k], (run, k)
