"""Smoke test of the benchmark scripts: import each one and run its smallest case.

No timing assertions (this machine is shared and noisy): only that every
benchmark runs end to end and returns the keys/rows run_all.py and
BENCHMARKS.md rely on. About a minute in all on 2 cores (each case spawns 2 gloo ranks; one opens Chromium).
"""
from __future__ import annotations

import contextlib
import importlib
import math
import os
import sys

import pytest

import helpers as h
from commtrace import torch_compat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, BENCH)

PAIRED_KEYS = {"plain", "traced", "added", "added_spread", "ratio", "ratio_spread", "blocks"}


def _mod(name):
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def results(suite_ports):
    """Smallest case of each benchmark, run once for the module."""
    os.environ.pop("COMMTRACE_DIR", None)
    cap, ddp, prof, size, runpath = (_mod(n) for n in ("bench_capture", "bench_ddp", "bench_profiler",
                                                      "bench_tracesize", "bench_run_path"))
    return {
        "capture": {"gloo": cap.run("gloo", calls=5, reps=2,
                                    only=["all_reduce 1 elem", "barrier", "issue cost: all_reduce 1 elem async",
                                          "caller CPU: all_reduce 1 elem"]),
                    "mpi": {"backend": "mpi", "available": False, "reason": "skipped in smoke test", "cases": {}}},
        "ddp": ddp.run(["tiny"], ("plain", "traced", "profiler"), reps=2, steps=1),
        "profiler": prof.run(calls=5, reps=6),
        "runpath": runpath.run(["tiny"], reps=2, steps=1),
        "tracesize": size.run(ops=300),
        "mpibackend": _mod("run_all").run_mpi_backend({"reps": 1, "ddp_steps": 1, "calls": 200, "hidden": 64,
                                                      "port": h.free_port()}),
        "cuda": (_mod("run_all").run_cuda({"reps": 1}, env=h.with_gpus(os.environ)) if h.gpu_count()
                 else {"available": False, "reason": "no CUDA GPU given to this test run"}),
        "html": _html(),
    }


def _html():
    """bench_html's smallest case, every page opened in one Chromium (where one is installed); its
    "limit" run a few hundred ops, not the timeline's limit (20,000: ~20 s more, the same code)."""
    from cdp import Browser, find_chromium
    with Browser(timeout=120) if find_chromium() else contextlib.nullcontext() as browser:
        return _mod("bench_html").run(demo_ops=50, big_ranks=2, big_ops=200, page_rounds=1, browser=browser,
                                      limit_ops=200)


def test_html(results):
    r = results["html"]
    for run in ("demo", "limit", "big"):
        assert r[run]["write_s"] > 0 and r[run]["bytes"] > 0 and r[run]["ops"] > 0
        c = r[run]["chromium"]
        assert (c["load_s"] > 0 and c["problems"] == []) if c["available"] else c["reason"]
    page = r["page"]                      # the `make demo`-sized page, against the full plotly.js
    assert page["bytes"] > 0 and page["budget_bytes"] == 1_500_000
    c = page["chromium"]
    assert (c["load_s"] > 0 and c["problems"] == [] and c.get("ratio", 1) > 0) if c["available"] else c["reason"]


def test_capture(results):
    r = results["capture"]["gloo"]
    assert r["available"] and r["backend"] == "gloo"
    assert set(r["cases"]) == {"all_reduce 1 elem", "barrier", "issue cost: all_reduce 1 elem async",
                               "caller CPU: all_reduce 1 elem"}
    for c in r["cases"].values():
        assert PAIRED_KEYS <= set(c) and c["blocks"] == 2 and c["plain"] > 0 and c["traced"] > 0
    # the same ops inside a DDP comm hook's bucket scope (a thread context of their own)
    assert set(r["comm_hook_scope"]) == {"all_reduce 1 elem", "caller CPU: all_reduce 1 elem"}
    assert all(PAIRED_KEYS <= set(c) and c["blocks"] == 2 for c in r["comm_hook_scope"].values())


def test_capture_cases_and_mpi_probe():
    cap = _mod("bench_capture")
    assert set(cap.CASES) == {"all_reduce 1 elem", "all_reduce 64 KB", "all_reduce 4 MB", "broadcast 1 elem",
                              "barrier", "issue cost: all_reduce 1 elem async", "issue cost: all_reduce 64 KB async",
                              "caller CPU: all_reduce 1 elem"}
    assert cap.mpi_available() is None or isinstance(cap.mpi_available(), str)
    s = cap.paired([100.0, 200.0], [110.0, 230.0], scale=1.0)
    assert s["added"] == 20.0 and s["added_spread"] == [10.0, 30.0] and math.isclose(s["ratio"], 1.125)


def test_ddp(results):
    r = results["ddp"]["tiny"]
    for k in ("desc", "params", "plain_ms", "collectives_per_step", "ops_bin", "meta_jsonl", "bytes_per_op",
              "traced", "profiler", "profiler_trace"):
        assert k in r, k
    assert r["ops_bin"] % 32 == 0 and r["ops_bin"] > 0
    assert r["collectives_per_step"] >= 1
    assert {"ms", "ratio", "ratio_spread"} <= set(r["traced"])
    assert r["profiler_trace"]["trace_bytes"] > 0


def _paired_summaries(r, modes):
    assert set(r["cases"]) == {"issue cost: all_reduce 1 elem async", "all_reduce 1 elem",
                               "caller CPU: all_reduce 1 elem"}
    for c in r["cases"].values():
        for mode in modes:
            assert PAIRED_KEYS <= set(c[mode]) and c[mode]["blocks"] == 6
            assert c[mode]["added_ci"][0] <= c[mode]["added"] <= c[mode]["added_ci"][1]


def test_profiler(results):
    _paired_summaries(results["profiler"], ("profiler", "traced"))


def test_profiler_flight_recorder(results):
    if not torch_compat.has_flight_recorder():
        pytest.skip("this torch has no Flight Recorder for gloo (c10d._dump_fr_trace_json)")
    r = results["profiler"]
    assert r["flight_recorder"]["available"], r["flight_recorder"]["reason"]
    _paired_summaries(r, ("flight_recorder",))
    for c in r["cases"].values():
        ex = c["traced_minus_fr"]
        assert ex["ci"][0] <= ex["median"] <= ex["ci"][1]


def test_run_path(results):
    """The run blocks went through the whole `commtrace run` path: ops with call sites and compute spans
    of every phase hook were recorded."""
    r = results["runpath"]
    assert r["wrapper"] in ("TracedPG", "TracedProcessGroup")
    m = r["models"]["tiny"]
    assert m["blocks"] == 2 and m["plain_ms"] > 0 and m["run_ms"] > 0 and m["cpu"]["plain_ms"] > 0
    rec = r["recorded"]
    assert rec["ops"] > 0 and rec["ops_with_callsite"] == rec["ops"]
    assert set(rec["span_phases"]) == {"forward", "backward", "optimizer"}


def test_tracesize(results):
    r = results["tracesize"]
    assert r["ops"] == 300 + _mod("bench_tracesize").WARMUP
    assert r["ops_bin"] == r["ops"] * 32 and r["meta_jsonl"] > 0
    assert r["bytes_per_op"] >= 32
    for k in ("maxrss_plain", "maxrss_traced", "peak_added_bytes", "peak_added_bytes_per_op"):
        assert k in r


def test_mpi_backend(results):
    r = results["mpibackend"]
    if not r["available"]:
        pytest.skip(r["reason"])  # mpi4py/mpirun absent: run_all reports "not available" too
    assert set(r["all_reduce_us"]) == {"1 element", "4 MB"}
    for m in r["all_reduce_us"].values():
        assert {"raw", "pg", "dist", "dist async"} <= set(m) and all(v > 0 for v in m.values())
    assert r["ddp_ms"]["gloo"] > 0 and r["ddp_ms"]["mpi"] > 0


def test_cuda(results):
    r = results["cuda"]
    if not r["available"]:
        pytest.skip(r["reason"])  # no GPU: run_all reports "not available" too
    assert {"issue cost: all_reduce 1 elem", "DDP step: mlp8 (1024 wide)"} <= set(r["cases"])
    for case in r["cases"].values():
        assert PAIRED_KEYS <= set(case) and case["plain"] > 0 and case["traced"] > 0


def test_markdown(results):
    ra = _mod("run_all")
    res = dict(results, report={"available": False, "reason": "skipped in smoke test"})
    info = {"date": "today", "machine": ra.machine(), "seconds": 1.0, "errors": {}}
    md = ra.markdown(res, info, quick=True)
    for heading in ("# commtrace benchmarks", "## Goals", "## 1.", "## 2.", "## 2b.", "## 3.", "## 4.", "## 5.", "## 6.",
                    "## 7.", "## 9.", "How to reproduce"):
        assert heading in md, heading
    assert "not available" in md
    _, rows = ra.goals(res)
    assert len(rows) >= 5
    goals = {row[0]: row for row in rows}
    assert any("Flight Recorder's" in g for g in goals)
    ddp22 = [row for g, row in goals.items() if "whole `commtrace run` path" in g]
    # 2 blocks give no interval: the goal cannot be settled
    assert len(ddp22) == 1 and ddp22[0][2] == "n/a"


def test_patch_writer_bench():
    """bench_patch.py: the C++ trace writer in the driver, off / on / flush thread blocked."""
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    bp = _mod("bench_patch")
    r = bp.run(ops=200, reps=1)
    assert set(r["variants"]) == {"off", "on", "blocked"}
    for name, row in r["variants"].items():
        assert row["enqueue_ns"] > 0 and row["total_ns"] >= row["enqueue_ns"]
        if name != "off":
            assert {"enqueue_ns_added", "total_ns_added_spread"} <= set(row)
    md = bp.section(r)
    assert "## 10." in md and "| blocked |" in md


def test_scale(tmp_path):
    sc = _mod("bench_scale")
    res = sc.run(ranks=2, ops=300, dask=False, workdir=str(tmp_path), kernel_rounds=1)
    assert res["cases"] == ["whole-1", "pool-1", "pool-2"]
    assert all(res[c]["ops"] == 600 and res[c]["wall_s"] > 0 for c in res["cases"])
    md = sc.markdown(res)
    assert "as `commtrace report`" in md and "process pool x2" in md
    if res["kernels"] is not None:           # the analysis kernels are built: side by side with numpy
        k = res["kernels"]["pool-2"]
        assert k["kernels"]["ops"] == k["numpy"]["ops"] == 600 and len(k["numpy"]["cpu_s"]) == 1
        assert "| process pool x2 |" in md and "CPU numpy" in md
    ra = _mod("run_all")
    _, rows = ra.goals({"scale": res})
    assert any("issue 18" in r[0] for r in rows) and any("issue 31" in r[0] for r in rows)


def test_scale_against_a_base_checkout(tmp_path):
    """--against: the same analysis from two trees, alternating (here this tree on both sides)."""
    sc = _mod("bench_scale")
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = sc.against(ranks=2, ops=300, base=here, rounds=1, workdir=str(tmp_path))
    assert len(res["before"]) == len(res["after"]) == 1
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 for r in res["before"] + res["after"])
    md = sc.against_markdown(res)
    assert "| before |" in md and "| after |" in md and "after / before: wall" in md


def test_scale_big_commands(tmp_path):
    """--big at a small size: report and compare in fresh processes, compare against a
    second run whose ops/spans files are hard links; --keep keeps both, --reuse re-reads."""
    import argparse
    sc = _mod("bench_scale")
    a = argparse.Namespace(dir=str(tmp_path), reuse=None, keep=True, big_ranks=4, big_ops=300, memory_limit="1G",
                           commands="report,compare")
    res = sc.big(a)
    assert res["ops"] == 1200 and res["ranks"] == 4
    rep, cmp_ = res["commands"]["report"], res["commands"]["compare"]
    assert rep["exit"] == 0 and cmp_["exit"] == 0
    assert rep["ops"] == 1200 and cmp_["ops"] == 2400
    assert rep["rss_driver"] > 0 and rep["workers"] >= 1 and rep["rss_worker"] > 0
    run, second = tmp_path / "big", tmp_path / "big-b"
    ops_file = next(f for f in os.listdir(run) if f.endswith(".ops.bin"))
    assert os.stat(second / ops_file).st_ino == os.stat(run / ops_file).st_ino          # a hard link
    meta = next(f for f in os.listdir(run) if f.endswith(".meta.jsonl"))
    assert os.stat(second / meta).st_ino != os.stat(run / meta).st_ino                   # a copy
    a.reuse, a.keep, a.commands = str(run), False, "report"
    again = sc.big(a)
    assert again["ops"] == 1200 and again["commands"]["report"]["exit"] == 0
    assert run.is_dir() and not second.exists()        # --reuse never deletes the run it was given
    assert "| report | 0 |" in sc.big_markdown(again)
