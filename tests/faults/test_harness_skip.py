"""A rank of torch's distributed test harness that skips its test (``skip_if_lt_x_gpu``: the rank
exits with one of the harness's TEST_SKIPS codes) ended as the harness meant, not badly: its end
record says ``how: "skip"`` with the harness's reason, and `commtrace check` tells it as
information (exit 0), not as a rank that exited with code 81."""
from __future__ import annotations

import json

import pytest

from commtrace.analysis import check as C
from helpers import torch_test_harness_lacks

from .conftest import check_main, diagnose_dir, traced_spawn


def test_a_skipped_test_of_torchs_harness_is_no_failure(tmp_path):
    if torch_test_harness_lacks():
        pytest.skip(f"torch's distributed test harness does not import: {torch_test_harness_lacks()}")
    out = tmp_path / "run"
    p = traced_spawn(out, "-v", script="harness_skip.py", timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "skipped" in p.stderr and "OK" in p.stderr, p.stderr[-3000:]
    ends = []
    for meta in out.glob("*.meta.jsonl"):
        lines = [json.loads(x) for x in meta.read_text().splitlines() if x.strip()]
        ends += [x for x in lines if x.get("type") == "end"]
    skips = [e for e in ends if e["how"] == "skip"]
    assert len(skips) == 2, ends   # the two ranks of test_needs_gpus
    assert all(e["exit_code"] not in (None, 0) and "at least 8" in e["reason"] for e in skips), skips
    run, findings = diagnose_dir(out)
    assert not [f for f in findings if f.severity == C.ERROR], [f.title for f in findings]
    told = [f for f in findings if "skipped its test" in f.title]
    assert told and all(f.severity == C.INFO for f in told), [f.title for f in findings]
    assert check_main(out).returncode == 0
