"""Run every commtrace benchmark, print the tables and write BENCHMARKS.md.

    python benchmarks/run_all.py [--quick] [--output BENCHMARKS.md] [--json raw.json] [--only capture,ddp,...]

Sections: capture (bench_capture.py, gloo and mpi), ddp (bench_ddp.py with the
torch.profiler mode), tracesize (bench_tracesize.py), report (bench_report.py,
if present), profiler (bench_profiler.py: Flight Recorder off/default, torch.profiler,
commtrace), runpath (bench_run_path.py: DDP through the whole `commtrace run`
path, toggled by commtrace.start()/stop()), mpibackend (bench_mpi_backend.py
under mpirun: the mpi backend against raw mpi4py and gloo), cuda (bench_cuda.py:
NCCL on one GPU; "not available" without one), bounded (bench_bounded.py:
--keep-last / --steps against full mode, disk and memory over a long run), patch (bench_patch.py: the
ProcessGroupMPI patch's C++ trace writer per op), scale (bench_scale.py: the partitioned analysis of big
runs), html (bench_html.py: report --html write time, page size, load time in headless Chromium),
partialreport (bench_partial_report.py: the partitioned report's --csv and windows against one frame),
views (bench_views.py: the partitioned report's timeline cost and streamed --events).
``make bench`` runs the full set
(about 10 minutes on 2 cores); ``--quick`` is a ~2-3 minute version with fewer
repetitions and smaller runs (same methods, wider spreads).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench_bounded  # noqa: E402
import bench_capture  # noqa: E402
import bench_ddp  # noqa: E402
import bench_patch  # noqa: E402
import bench_html  # noqa: E402
import bench_modules  # noqa: E402
import bench_profiler  # noqa: E402
import bench_scale  # noqa: E402
import bench_partial_report  # noqa: E402
import bench_views  # noqa: E402
import bench_run_path  # noqa: E402
import bench_tracesize  # noqa: E402
import intervals  # noqa: E402

SECTIONS = ("capture", "profiler", "runpath", "ddp", "tracesize", "report", "mpibackend", "cuda", "bounded", "html",
            "patch", "scale", "scale_check", "partialreport", "views", "modules")

FULL = {
    # 41 blocks: on this 2-core VM a block's median of a 1-element blocking op
    # moves by +-50 us (thread wake-ups); the median of 15 paired differences
    # still moved by +-10 us between runs.
    "capture": {"calls": 400, "reps": 41},
    "profiler": {"calls": 400, "reps": 41},
    "runpath": [(("mlp8", "cnn"), 61, 1), (("mlp100m",), 15, 1)],
    "ddp": [(("mlp8", "cnn"), 41, 1), (("mlp100m",), 9, 1)],
    "tracesize": {"ops": 1_000_000},
    "report": [("6.4M", 64, 100_000, 1_000_000), ("10M", 16, 625_000, 100_000)],
    "mpibackend": {"reps": 15, "ddp_steps": 10},
    "cuda": {"reps": 11},
    "bounded": {"calls": 400, "reps": 15, "ops": 200_000, "rounds": 3},
    "patch": {"ops": 20_000, "reps": 15},
    "scale": {"ranks": 64, "ops": 100_000, "dask": True},
    "scale_check": {"ranks": 64, "ops": 100_000},
    "html": {"demo_ops": 2000, "big_ranks": 8, "big_ops": 125_000},
    "partialreport": {"ranks": 16, "ops": 100_000, "reps": 3},
    "views": {"ranks": 64, "ops": 25_000, "rounds": 3},
    "modules": {"reps": 21},
}
QUICK = {
    "capture": {"calls": 200, "reps": 7},
    "profiler": {"calls": 200, "reps": 7},
    "runpath": [(("mlp8", "cnn"), 9, 1), (("mlp100m",), 6, 1)],
    "ddp": [(("mlp8", "cnn"), 6, 1), (("mlp100m",), 3, 1)],
    "tracesize": {"ops": 200_000},
    "report": [("1.3M", 64, 20_000, 200_000)],
    "mpibackend": {"reps": 7, "ddp_steps": 4},
    "cuda": {"reps": 5},
    "bounded": {"calls": 200, "reps": 5, "ops": 50_000, "rounds": 2},
    "patch": {"ops": 20_000, "reps": 5},
    "scale": {"ranks": 64, "ops": 20_000, "dask": True},
    "scale_check": {"ranks": 64, "ops": 20_000},
    "html": {"demo_ops": 2000, "big_ranks": 8, "big_ops": 25_000},
    "partialreport": {"ranks": 8, "ops": 50_000, "reps": 1},
    "views": {"ranks": 16, "ops": 20_000, "rounds": 1},
    "modules": {"reps": 7},
}

GOALS = {
    "blocking_us": 10.0, "ddp_ratio": 1.01,
    # issue 22
    "blocking_us_22": 2.0, "caller_cpu_us": 1.0, "run_path_ratio": 1.005, "disk_bytes_per_op": 32.0,
    "report_ops_per_s": 1e6, "peak_bytes_per_op": 200.0,
    "mpi_small_ratio": 2.0, "mpi_large_ratio": 1.10, "mpi_ddp_ratio": 1.0,
}


# -- running ----------------------------------------------------------------------
def machine() -> dict:
    import torch
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "torch": torch.__version__, "python": platform.python_version(),
            "mem_bytes": mem, "loadavg_start": load, "platform": platform.platform()}


def run_report(cfg) -> dict:
    script = os.path.join(HERE, "bench_report.py")
    if not os.path.exists(script):
        return {"available": False, "reason": "benchmarks/bench_report.py not present"}
    out = {"available": True, "runs": {}}
    for label, ranks, ops, perfetto_ops in cfg:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
            p = subprocess.run([sys.executable, script, "--ranks", str(ranks), "--ops", str(ops),
                                "--perfetto-ops", str(perfetto_ops), "--json", path, "--dir", os.path.join(d, "runs")],
                               capture_output=True, text=True, env=env, timeout=900)
            if p.returncode != 0 or not os.path.exists(path):
                out["runs"][label] = {"error": (p.stderr or p.stdout).strip().splitlines()[-1:] or ["failed"]}
                continue
            with open(path) as f:
                out["runs"][label] = json.load(f)
    return out


def run_mpi_backend(cfg) -> dict:
    why = bench_capture.mpi_available()
    if why:
        return {"available": False, "reason": why}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.json")
        why = bench_capture.run_under_mpirun(
            os.path.join(HERE, "bench_mpi_backend.py"),
            ["--reps", str(cfg["reps"]), "--ddp-steps", str(cfg["ddp_steps"]), "--json", path,
             *(f"--{k}={cfg[k]}" for k in ("calls", "hidden", "port") if k in cfg)], path, 900)
        if why:
            return {"available": False, "reason": why}
        with open(path) as f:
            return {"available": True, **json.load(f)}


def run_cuda(cfg, env: dict | None = None) -> dict:
    """bench_cuda.py in a child; ``env``: the child's environment where it differs from this
    process's (a test run hides the GPUs from itself and gives them to the child)."""
    if env is None:
        import torch
        if not torch.cuda.is_available():
            return {"available": False, "reason": "no CUDA GPU on this machine"}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.json")
        # the child's rendezvous port comes from here (a test run patches bench_capture.free_port)
        env = {**(os.environ if env is None else env), "MASTER_PORT": str(bench_capture.free_port())}
        r = subprocess.run([sys.executable, os.path.join(HERE, "bench_cuda.py"), "--reps", str(cfg["reps"]),
                            "--json", path], capture_output=True, text=True, timeout=900, env=env)
        if r.returncode or not os.path.exists(path):
            said = (r.stderr.strip() or r.stdout.strip()).splitlines()   # bench_cuda says "not available" on stdout
            return {"available": False, "reason": said[-1] if said else "failed"}
        with open(path) as f:
            return {"available": True, **json.load(f)}


def run_section(name: str, cfg) -> dict:
    if name == "capture":
        return {b: bench_capture.run(b, cfg["calls"], cfg["reps"]) for b in ("gloo", "mpi")}
    if name == "profiler":
        return bench_profiler.run(cfg["calls"], cfg["reps"])
    if name == "runpath":
        res: dict = {"models": {}, "recorded": {}}
        for models, reps, steps in cfg:
            r = bench_run_path.run(models, reps, steps)
            res["wrapper"] = r["wrapper"]
            res["models"].update(r["models"])
            res["recorded"] = {k: res["recorded"].get(k, 0) + v for k, v in r["recorded"].items()
                               if isinstance(v, int)}
        return res
    if name == "ddp":
        res = {}
        for models, reps, steps in cfg:
            res.update(bench_ddp.run(models, ("plain", "traced", "profiler"), reps, steps))
        return res
    if name == "tracesize":
        return bench_tracesize.run(cfg["ops"])
    if name == "report":
        return run_report(cfg)
    if name == "mpibackend":
        return run_mpi_backend(cfg)
    if name == "cuda":
        return run_cuda(cfg)
    if name == "modules":
        return bench_modules.in_subprocess(cfg["reps"])
    if name == "bounded":
        return bench_bounded.run(cfg["calls"], cfg["reps"], cfg["ops"], cfg["rounds"])
    if name == "patch":
        return bench_patch.run(cfg["ops"], cfg["reps"])
    if name == "scale":
        return bench_scale.run(cfg["ranks"], cfg["ops"], cfg["dask"])
    if name == "scale_check":
        return bench_scale.check_side_by_side(cfg["ranks"], cfg["ops"])
    if name == "html":
        return bench_html.run(cfg["demo_ops"], cfg["big_ranks"], cfg["big_ops"])
    if name == "partialreport":
        return bench_partial_report.run(cfg["ranks"], cfg["ops"], cfg["reps"])
    if name == "views":
        return bench_views.run(cfg["ranks"], cfg["ops"], cfg["rounds"])
    raise ValueError(name)


# -- formatting ---------------------------------------------------------------------
def _f(x, fmt="{:.2f}"):
    return "n/a" if x is None or x != x else fmt.format(x)


def _spread(s, fmt="{:+.2f}"):
    return f"{fmt.format(s[0])} .. {fmt.format(s[1])}"


def _ci(ci, fmt="{:+.2f}"):
    return "n/a (< 6 blocks)" if not ci else f"[{fmt.format(ci[0])}, {fmt.format(ci[1])}]"


def _settled(ci, limit: float):
    """met / not met when the 95 % interval lies on one side of ``limit``, else None (unresolved)."""
    return intervals.resolves(ci, limit)


def table(head: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def section_capture(res) -> str:
    parts = ["## 1. Added latency per traced op (2 ranks)\n",
             "Same process group called directly (plain) and through the wrapper `commtrace run` installs "
             "(the native C++ wrapper when built, else the Python `TracedProcessGroup`) with the real "
             "Recorder (traced), alternating blocks. With the native wrapper, the headline cases are also "
             "measured through the Python wrapper in the same run (rows marked *Python wrapper*), and inside a DDP comm hook's bucket scope, where the calling thread has an annotation context of its own (rows marked *inside a DDP comm hook*). Each block: per-call times, block median; figure = median "
             "over blocks of the paired difference traced - plain; 95 % interval of that median (order statistics, "
             "benchmarks/intervals.py); spread = min..max of those differences. The plain group has torch's "
             "Flight Recorder on, as by default (section 5 has it off as well). "
             "Blocking ops include the wait. *Issue cost* = time for `allreduce(async_op=True)` to return "
             "(the op is waited for outside the timed region). *Caller CPU* = CPU time of the calling thread "
             "per blocking call (`thread_time`), the steadiest figure on this shared machine.\n"]
    for b, r in res.items():
        if not r.get("available"):
            parts.append(f"**{b}**: not available ({r.get('reason')})\n")
            continue
        cases = list(r["cases"].items())
        cases += [(f"{n} (*Python wrapper*)", c) for n, c in r.get("python_wrapper", {}).items()]
        cases += [(f"{n} (*inside a DDP comm hook*)", c) for n, c in r.get("comm_hook_scope", {}).items()]
        rows = [[n, _f(c["plain"]), _f(c["traced"]), f"**{_f(c['added'], '{:+.2f}')}**", _ci(c.get("added_ci")),
                 _spread(c["added_spread"]), _f(c["ratio"], "{:.3f}")] for n, c in cases]
        parts.append(f"**{b}** backend, {r.get('wrapper') or 'python'} wrapper\n")
        parts.append(table(["case", "plain µs", "traced µs", "added µs (median)", "95 % interval", "spread µs",
                            "ratio"], rows) + "\n")
    return "\n".join(parts)


def section_ddp(res) -> str:
    rows = []
    for name, r in res.items():
        t, p = r.get("traced", {}), r.get("profiler")
        rows.append([f"{name}: {r['desc']}", f"{r['params'] / 1e6:.2f} M", f"{r['steps_per_block']} x {r['blocks']}",
                     _f(r["plain_ms"], "{:.1f}"), _f(t.get("ms"), "{:.1f}"), f"**{_f(t.get('ratio'), '{:.3f}')}**",
                     _spread(t["ratio_spread"], "{:.3f}") if t else "n/a",
                     _f(p and p["ratio"], "{:.3f}"), _spread(p["ratio_spread"], "{:.3f}") if p else "n/a",
                     _f(r["collectives_per_step"], "{:.1f}")])
    return ("## 2. DDP step time, traced / untraced (2 gloo ranks)\n\n"
            "Per model, identical DDP replicas over the same default group: `process_group=` the plain group, "
            "or the wrapper `commtrace run` installs over it (native when built; real Recorder, no phase hooks); a third mode runs the plain "
            "replica inside `torch.profiler.profile(record_shapes=True)`. Blocks of steps alternate (rotating "
            "order); ratio = median over blocks of block mean / paired plain block mean; spread = min..max.\n\n"
            + table(["model", "params", "steps x blocks", "plain ms/step", "traced ms/step", "traced ratio",
                     "spread", "profiler ratio", "spread", "collectives/step"], rows) + "\n")


def section_run_path(rp) -> str:
    rows = []
    for name, r in (rp.get("models") or {}).items():
        c = r["cpu"]
        rows.append([f"{name}: {r['desc']}", f"{r['steps_per_block']} x {r['blocks']}", _f(r["plain_ms"], "{:.1f}"),
                     _f(r["run_ms"], "{:.1f}"), f"**{_f(r['ratio'], '{:.4f}')}**", _ci(r["ratio_ci"], "{:.4f}"),
                     _spread(r["ratio_spread"], "{:.3f}"), f"{_f(c['ratio'], '{:.4f}')} {_ci(c['ratio_ci'], '{:.4f}')}"])
    rec = rp.get("recorded") or {}
    return ("## 2b. DDP step time through the whole `commtrace run` path (bench_run_path.py, 2 gloo ranks)\n\n"
            "Each rank calls `commtrace.start()` after `init_process_group` -- the activation `commtrace run` "
            "does in each process: phase hooks (DDP, autograd, optimizer; labels and compute spans), call-site "
            "lookup, flush thread, watchdog, the default group wrapped in place -- and builds two identical DDP "
            "replicas: on the raw group, and on the traced one. Blocks alternate ABBA between *plain* (tracing "
            "stopped by `commtrace.stop()`, raw replica) and *run* (tracing started again, traced replica); "
            "start/stop happen between blocks, untimed. ratio = median over blocks of run / paired plain block "
            "mean step time, [95 % interval of the median]; CPU = the same for the process's CPU time per step "
            f"(all threads). The run blocks recorded {rec.get('ops', 'n/a')} ops ({rec.get('ops_with_callsite', 'n/a')} "
            f"with a call site) and {rec.get('spans', 'n/a')} compute spans ({rp.get('wrapper', '?')} wrapper).\n\n"
            + table(["model", "steps x blocks", "plain ms/step", "run ms/step", "ratio", "95 % interval", "spread",
                     "CPU ratio [95 %]"], rows) + "\n")


def section_size(ts, ddp) -> str:
    rows = []
    for name, r in (ddp or {}).items():
        rows.append([f"DDP {name} (whole benchmark run, {r['trace_ops']} ops)", r["ops_bin"], r["meta_jsonl"],
                     _f(r["ops_bin_bytes_per_op"], "{:.1f}"), f"**{_f(r['bytes_per_op'], '{:.1f}')}**"])
    if ts:
        rows.append([f"{ts['ops']:,} blocking 1-elem all_reduce (1 rank)", ts["ops_bin"], ts["meta_jsonl"],
                     _f(ts["ops_bin_bytes_per_op"], "{:.2f}"), f"**{_f(ts['bytes_per_op'], '{:.2f}')}**"])
    out = ("## 3. Trace size and capture memory\n\n"
           "Bytes on disk per op = (ops.bin + meta.jsonl) / ops issued. A DDP run's meta.jsonl is a one-time "
           "cost (header, groups, one `sig` line per distinct call), amortized as the run grows; ops.bin is "
           "32 B per record (an op still running at a flush is written twice).\n\n"
           + table(["run", "ops.bin B", "meta.jsonl B", "ops.bin B/op", "total B/op"], rows) + "\n")
    if ts:
        out += ("\nPeak memory added per rank (RSS high-water `VmHWM`, fresh subprocess each, traced - plain, "
                f"{ts['ops']:,} ops):\n\n"
                + table(["plain peak RSS", "traced peak RSS", "added", "added per op"],
                        [[f"{ts['maxrss_plain'] / 2**20:.1f} MiB", f"{ts['maxrss_traced'] / 2**20:.1f} MiB",
                          f"{ts['peak_added_bytes'] / 2**20:.2f} MiB", f"**{ts['peak_added_bytes_per_op']:.1f} B/op**"]])
                + "\n\n(Rows are buffered only between flushes, every 0.5 s, so the added memory is bounded by the "
                "op rate, not the run length. Informational, not side by side: ops/s in these runs were "
                f"{ts['ops_per_s_plain']:.0f} plain, {ts['ops_per_s_traced']:.0f} traced.)\n")
    return out


def section_report(rep) -> str:
    if not rep or not rep.get("available"):
        return f"## 4. Report: load + analysis\n\nnot available ({(rep or {}).get('reason', 'not run')})\n"
    rows = []
    for label, r in rep["runs"].items():
        if "error" in r:
            rows.append([label, "failed: " + " ".join(r["error"])] + [""] * 5)
            continue
        rows.append([f"{r['ops']:,} ({r['ranks']} ranks)", f"{r['load_s']:.2f}", f"{r['analysis_s']:.2f}",
                     f"**{r['ops_per_s'] / 1e6:.2f} M**", f"**{r['rss_bytes_per_op']:.0f}**",
                     f"{r.get('tracemalloc_bytes_per_op', float('nan')):.0f}",
                     f"{r['perfetto_ops']:,} ops in {r['perfetto_s']:.2f} s ({r['perfetto_mb']:.0f} MB)"])
    return ("## 4. Report: load + analysis of synthetic runs (bench_report.py)\n\n"
            + table(["ops", "load s", "analysis s", "load+analysis ops/s", "peak RSS B/op", "tracemalloc B/op",
                     "Perfetto export"], rows) + "\n")


def section_profiler(prof, ddp) -> str:
    rows = []
    prof = prof or {}
    fr_info = prof.get("flight_recorder") or {}
    for name, r in (prof.get("cases") or {}).items():
        p, t, fr = r["profiler"], r["traced"], r.get("flight_recorder")
        ex = r.get("traced_minus_fr")
        rows.append([name, _f(fr and fr["plain"]), _f(p["plain"]),
                     f"**{_f(fr and fr['added'], '{:+.2f}')}** {_ci(fr and fr['added_ci'])}",
                     f"**{_f(t['added'], '{:+.2f}')}** {_ci(t['added_ci'])}",
                     f"{_f(p['added'], '{:+.2f}')} {_ci(p['added_ci'])}",
                     f"{_f(ex and ex['median'], '{:+.2f}')} {_ci(ex and ex['ci'])}"])
    fr_note = "" if fr_info.get("available", True) else \
        f" Flight Recorder off: not available ({fr_info.get('reason')}), so its columns are n/a."
    out = ("## 5. What users already have: Flight Recorder and torch.profiler, side by side\n\n"
           "Four modes alternating in blocks in one run over the same gloo group, 2 ranks (bench_profiler.py): "
           "*FR off* (torch's c10d Flight Recorder switched off, as `TORCH_FR_BUFFER_SIZE=0` -- it is one object "
           "per process, configured when the first gloo group is built, so it is switched inside the process: "
           "benchmarks/flight_recorder.py), *FR default* (on, as torch 2.13 ships), the same inside "
           "`torch.profiler.profile(record_shapes=True)`, and through the wrapper `commtrace run` installs "
           f"({fr_info.get('wrapper', 'native when built')} wrapper) with the Flight Recorder on. "
           "+FR = FR default - FR off; +commtrace and +profiler are against FR default (what a user who adds "
           "either has); commtrace - FR = per block (commtrace - FR default) - (FR default - FR off): below 0, "
           "commtrace adds less than the Flight Recorder does. Medians over blocks of paired differences, "
           "[95 % interval of the median]." + fr_note + "\n\n"
           + table(["case", "FR off µs", "FR default µs", "+ Flight Recorder µs", "+ commtrace µs",
                    "+ torch.profiler µs", "commtrace - FR µs"], rows) + "\n")
    rows = []
    for name, r in (ddp or {}).items():
        pt = r.get("profiler_trace")
        if not pt:
            continue
        rows.append([name, _f(r.get("profiler", {}).get("ratio"), "{:.3f}"), _f(r["traced"]["ratio"], "{:.3f}"),
                     f"{pt['trace_bytes']:,} B / {pt['collectives']} collectives",
                     f"**{pt['bytes_per_collective']:,.0f}**" if pt["bytes_per_collective"] else "n/a",
                     _f(pt["collective_event_bytes_per_collective"], "{:.0f}"),
                     f"**{_f(r['bytes_per_op'], '{:.1f}')}** ({r['ops_bin_bytes_per_op']:.0f} in ops.bin)"])
    if rows:
        out += ("\nSame DDP workload (section 2): step-time ratio and trace size per collective. The profiler's "
                "Chrome trace (`export_chrome_trace`, one rank, one block of steps) records every op, so its "
                "bytes per collective include the model's compute events; the next column counts only the "
                "collective's own events (`gloo:*` + `record_param_comms`).\n\n"
                + table(["model", "profiler step ratio", "commtrace step ratio", "profiler trace",
                         "profiler B/collective", "profiler collective-event B", "commtrace B/op"], rows) + "\n")
    return out


def goals(res) -> tuple[str, list]:
    rows = []

    def add(goal, value, ok, note=""):
        status = "n/a" if ok is None else f"**{ok}**" if isinstance(ok, str) else "**met**" if ok else "**not met**"
        rows.append([goal, value, status, note])

    prof = res.get("profiler") or {}
    cap = (res.get("capture") or {}).get("gloo", {})
    b = (cap.get("cases") or {}).get("all_reduce 1 elem")
    if b:
        add("issue 2: added latency ≤ 10 µs (1-elem gloo all_reduce, 2 ranks, median)", f"+{b['added']:.2f} µs "
            f"(spread {b['added_spread'][0]:+.1f}..{b['added_spread'][1]:+.1f})", b["added"] <= GOALS["blocking_us"],
            f"{b['added'] - GOALS['blocking_us']:+.2f} µs vs goal")
    else:
        add("issue 2: added latency ≤ 10 µs", "not measured", None)
    ddp = res.get("ddp") or {}
    if "mlp8" in ddp:
        r = ddp["mlp8"]["traced"]["ratio"]
        others = ", ".join(f"{k} {v['traced']['ratio']:.3f}" for k, v in ddp.items() if k != "mlp8")
        add("issue 2: DDP step ratio ≤ 1.01 (8-layer MLP)", f"{r:.3f}", r <= GOALS["ddp_ratio"],
            f"other models: {others}" if others else "")
    else:
        add("issue 2: DDP step ratio ≤ 1.01", "not measured", None)
    goals_22(res, add)
    ic = (prof.get("cases") or {}).get("issue cost: all_reduce 1 elem async")
    if ic:
        t, p = ic["traced"]["added"], ic["profiler"]["added"]
        add("issue cost vs torch.profiler (informational)", f"+{t:.2f} µs (profiler +{p:.2f} µs)", None,
            f"{t - p:+.2f} µs vs profiler")
    ts = res.get("tracesize")
    if ts:
        # ops.bin is exactly 32 B/record; meta.jsonl is a fixed ~1 KB, i.e. +0.001 B/op over 1 M ops:
        # counted as met when the records are 32 B and the total rounds to 32.0.
        add("≤ 32 B/op on disk (informational)", f"{ts['bytes_per_op']:.4f} B/op ({ts['ops']:,}-op run)",
            ts["ops_bin_bytes_per_op"] <= GOALS["disk_bytes_per_op"] + 1e-3
            and round(ts["bytes_per_op"], 1) <= GOALS["disk_bytes_per_op"],
            f"ops.bin {ts['ops_bin_bytes_per_op']:.4f} B/op (32 B records), meta.jsonl {ts['meta_jsonl']} B in all")
        add("capture: ≤ 200 B/op peak memory added (informational)", f"{ts['peak_added_bytes_per_op']:.1f} B/op "
            f"({ts['peak_added_bytes'] / 2**20:.1f} MiB for {ts['ops']:,} ops)",
            ts["peak_added_bytes_per_op"] <= GOALS["peak_bytes_per_op"])
    rep = res.get("report") or {}
    if rep.get("available"):
        for label, r in rep["runs"].items():
            if "error" in r:
                add(f"report {label}: ≥ 1 M ops/s, ≤ 200 B/op", "failed", None)
                continue
            add(f"issue 4, {r['ranks']} ranks x {r['ops_per_rank']:,} ops: load+analysis ≥ 1 M ops/s", f"{r['ops_per_s'] / 1e6:.2f} M ops/s",
                r["ops_per_s"] >= GOALS["report_ops_per_s"])
            add(f"issue 4, {r['ranks']} ranks x {r['ops_per_rank']:,} ops: peak memory ≤ 200 B/op", f"{r['rss_bytes_per_op']:.0f} B/op (RSS)",
                r["rss_bytes_per_op"] <= GOALS["peak_bytes_per_op"])
            if r.get("perfetto_ops", 0) >= 1_000_000:
                add(f"issue 4: Perfetto export of {r['perfetto_ops']:,} ops ≤ 10 s", f"{r['perfetto_s']:.2f} s",
                    r["perfetto_s"] <= 10.0, f"{r['perfetto_mb']:.0f} MB written")
    else:
        add("report ≥ 1 M ops/s, ≤ 200 B/op", "not available", None)
    sc = res.get("scale") or {}
    if sc.get("cases"):
        best = max((sc[c] for c in sc["cases"] if sc[c]["mode"] == "pool"), key=lambda r: r["ops_per_s"])
        add("issue 18: partitioned summary + skew + step tables ≥ 5 M ops/s (process pool)",
            f"{best['ops_per_s'] / 1e6:.2f} M ops/s ({best['workers']} workers)", best["ops_per_s"] >= 5e6,
            f"as commtrace report: {sc['whole-1']['ops_per_s'] / 1e6:.2f} M ops/s side by side")
        add("issue 18: peak memory ≤ 64 B/op (analysing process + largest worker)", f"{best['bytes_per_op']:.0f} B/op",
            best["bytes_per_op"] <= 64)
        rep = sc["whole-1"]
        add("issue 31: the report (one engine, as commtrace report) ≥ 5 M ops/s, ≤ 64 B/op",
            f"{rep['ops_per_s'] / 1e6:.2f} M ops/s, {rep['bytes_per_op']:.0f} B/op",
            rep["ops_per_s"] >= 5e6 and rep["bytes_per_op"] <= 64)
    mb = res.get("mpibackend") or {}
    if mb.get("available"):
        one, big = mb["all_reduce_us"]["1 element"], mb["all_reduce_us"]["4 MB"]
        r1, r4 = one["pg"] / _raw(one), big["pg"] / _raw(big)
        add("issue 3: 1-elem all_reduce ≤ 2x raw mpi4py (backend call + wait)",
            f"{r1:.2f}x ({one['pg']:.2f} vs {_raw(one):.2f} µs)", r1 <= GOALS["mpi_small_ratio"],
            f"path: {mb.get('pg_path', 'python')}; Python path {_f(one.get('pg py') and one['pg py'] / _raw(one))}x; "
            f"dist.all_reduce (adds torch's front end): {one['dist'] / _raw(one):.2f}x")
        add("issue 3: 4 MB all_reduce within 10% of raw mpi4py", f"{r4:.2f}x", r4 <= GOALS["mpi_large_ratio"],
            f"vs raw on a copy of the buffer: {big['pg'] / big['raw']:.2f}x")
        dr = mb["ddp_ms"]["mpi"] / mb["ddp_ms"]["gloo"]
        add("issue 3: DDP step on mpi no worse than gloo", f"{dr:.2f}x", dr <= GOALS["mpi_ddp_ratio"])
    else:
        add("issue 3: mpi backend ratios", "not available", None, mb.get("reason", "not run"))
    h = res.get("html")
    if h:
        b = h["budgets"]
        pg = h.get("page")
        if pg:
            c = pg["chromium"]
            ok_size = pg["bytes"] <= b["page_bytes"]
            add(f"issue 33: `make demo`-sized page ≤ {b['page_bytes'] / 1e6:.1f} MB, loads in Chromium ≤ "
                f"{b['page_load_s']:.0f} s", f"{pg['bytes'] / 1e6:.2f} MB, "
                + (f"{c['load_s']:.2f} s" if c.get("available") else "no Chromium"),
                (ok_size and c["load_s"] <= b["page_load_s"] and not c["problems"]) if c.get("available") else None,
                (f"full plotly.js page: {c['full_plotly_load_s']:.2f} s (ratio {c['ratio']:.2f})"
                 if c.get("ratio") else ""))
        add("issue 19: HTML report of a demo-sized run < 2 s", f"{h['demo']['write_s']:.2f} s "
            f"({h['demo']['ops']:,} ops)", h["demo"]["write_s"] < b["demo_write_s"])
        for big in (h["big"], h["limit"]):
            c = big["chromium"]
            add(f"issue 19: {big['ops']:,}-op page ≤ {b['big_bytes'] / 2**20:.0f} MiB, loads in Chromium < 10 s",
                f"{big['bytes'] / 2**20:.1f} MiB, " + (f"{c['load_s']:.2f} s" if c.get("available") else "no Chromium"),
                (big["bytes"] <= b["big_bytes"] and c["load_s"] < b["big_load_s"] and not c["problems"])
                if c.get("available") else None)
    return table(["goal", "measured", "status", "note"], rows) + "\n", rows


def _or_unresolved(settled, ci):
    return "unresolved" if settled is None and ci else settled


def goals_22(res, add) -> None:
    """Issue 22's goals. A goal on a median counts as met or not met by the median; the note says
    whether the 95 % interval settles it (lies on one side of the limit) on this run."""
    def settled(ci, limit):
        v = _settled(ci, limit)
        return "interval settles it" if v is not None else "interval straddles the limit: unresolved"

    cases = ((res.get("profiler") or {}).get("cases") or {})
    ic = cases.get("issue cost: all_reduce 1 elem async")
    if ic and ic.get("flight_recorder"):
        t, fr, ex = ic["traced"], ic["flight_recorder"], ic["traced_minus_fr"]
        add("issue 22: issue cost of a 1-elem gloo all_reduce, commtrace's added ≤ Flight Recorder's",
            f"commtrace {t['added']:+.2f} µs {_ci(t['added_ci'])}, FR {fr['added']:+.2f} µs {_ci(fr['added_ci'])}",
            ex["median"] <= 0, f"per block commtrace - FR: {ex['median']:+.2f} µs {_ci(ex['ci'])}; "
            + settled(ex["ci"], 0.0))
    else:
        add("issue 22: issue cost ≤ Flight Recorder's", "not measured", None,
            ((res.get("profiler") or {}).get("flight_recorder") or {}).get("reason") or "")
    cap = (((res.get("capture") or {}).get("gloo") or {}).get("cases") or {})
    for case, key, label in (("all_reduce 1 elem", "blocking_us_22", "blocking 1-elem all_reduce ≤ +2 µs median"),
                             ("caller CPU: all_reduce 1 elem", "caller_cpu_us", "caller CPU ≤ +1 µs")):
        b, fr_run = cap.get(case), (cases.get(case) or {}).get("traced")
        also = f"; section 5 (same run as the Flight Recorder): {fr_run['added']:+.2f} µs " \
            f"{_ci(fr_run.get('added_ci'))}" if fr_run else ""
        if b:
            add(f"issue 22: {label} (section 1)", f"{b['added']:+.2f} µs {_ci(b.get('added_ci'))}",
                b["added"] <= GOALS[key], settled(b.get("added_ci"), GOALS[key]) + also)
        else:
            add(f"issue 22: {label}", "not measured", None)
    rp = (res.get("runpath") or {}).get("models") or {}
    for name, r in rp.items():
        add(f"issue 22: DDP step, whole `commtrace run` path ≤ {GOALS['run_path_ratio']} ({name}, section 2b)",
            f"{r['ratio']:.4f} {_ci(r['ratio_ci'], '{:.4f}')}",
            _or_unresolved(_settled(r["ratio_ci"], GOALS["run_path_ratio"]), r["ratio_ci"]),
            f"met/not met only when the 95 % interval settles it; CPU ratio {r['cpu']['ratio']:.4f} "
            f"{_ci(r['cpu']['ratio_ci'], '{:.4f}')}")
    if not rp:
        add("issue 22: DDP step, whole `commtrace run` path ≤ 1.005", "not measured", None)


def _raw(m: dict) -> float:
    """Raw mpi4py on the tensor's own memory (the same buffer the backend reduces);
    runs from before that variant was recorded fall back to raw on a copy."""
    return m.get("raw t mem", m["raw"])


def section_mpi_backend(mb) -> str:
    if not mb.get("available"):
        return f"## 6. mpi backend vs raw mpi4py and gloo\n\nnot available ({mb.get('reason')})\n"
    rows = []
    for label, m in mb["all_reduce_us"].items():
        py, raw = m.get("pg py"), _raw(m)   # pg py: absent in runs from before the C++ fast path
        rows.append([label] + [f"{m[k]:.2f}" for k in ("raw",)] + [f"{raw:.2f}", f"{m['pg']:.2f}", _f(py)]
                    + [f"{m[k]:.2f}" for k in ("dist", "dist async")]
                    + [f"**{m['pg'] / raw:.2f}**", _f(py and py / raw), f"{m['dist'] / raw:.2f}"])
    h = mb["hidden"]
    return ("## 6. mpi backend vs raw mpi4py and gloo (bench_mpi_backend.py, `mpirun -n 2`, untraced)\n\n"
            "Interleaved repetitions, median of per-batch means. raw copy = `comm.Allreduce(IN_PLACE, ndarray, SUM)` "
            "on a copy of the tensor's data; raw = the same on the tensor's own memory (`t.numpy()`), the buffer "
            "the backend reduces: the ratios use it (at 4 MB the two raw variants alone differed by up to 15 % within "
            "one run on this VM: 351 vs 402 µs); "
            "pg = `pg.allreduce([t], opts)` + `.wait()` (exactly what `dist.all_reduce` hands the backend) on "
            f"the group `new_group(backend=\"mpi\")` returns (path: {mb.get('pg_path', 'python')}); "
            "pg py = the same on the Python `MPIProcessGroup` (the C++ fast path's inner group); "
            "dist = `dist.all_reduce(t)` (adds torch's Python front end, the same for every backend); "
            f"MPI thread level {mb['thread_level']} (3 = MULTIPLE).\n\n"
            + table(["all_reduce", "raw copy µs", "raw µs", "pg µs", "pg py µs", "dist µs", "dist async µs",
                     "pg / raw", "pg py / raw", "dist / raw"], rows)
            + f"\nDDP step, Linear(10→{h}→{h}→5), bucket_cap_mb=1: gloo {mb['ddp_ms']['gloo']:.2f} ms, "
            f"mpi {mb['ddp_ms']['mpi']:.2f} ms, mpi / gloo **{mb['ddp_ms']['mpi'] / mb['ddp_ms']['gloo']:.2f}**\n")


def section_cuda(c) -> str:
    if not c.get("available"):
        return (f"## 7. CUDA: NCCL on one GPU (bench_cuda.py)\n\nnot available ({c.get('reason')}); "
                "measurements taken on a GPU machine are in the analysis below.\n")
    rows = [[k, _f(r["plain"]), _f(r["traced"]), _f(r["added"], "{:+.2f}"), _spread(r["added_spread"]),
             _f(r["ratio"], "{:.3f}")] for k, r in c["cases"].items()]
    return (f"## 7. CUDA: NCCL on one GPU (bench_cuda.py; {c['device']}, torch {c['torch']})\n\n"
            "One-rank NCCL world; plain and traced alternate in blocks. Issue cost = time for `allreduce` "
            "to return (NCCL never blocks the host); traced includes recording the op's CUDA end event. "
            "DDP steps end in `torch.cuda.synchronize()`; the bare forwarder is a Python ProcessGroup "
            "that only forwards (the floor of any Python-level wrapper).\n\n"
            + table(["case", "plain µs", "traced µs", "added µs", "spread µs", "ratio"], rows))


def section_bounded(b) -> str:
    rows = [[f"{name} ({mode})", _f(r["plain"]), _f(r["traced"]), _f(r["added"], "{:+.2f}"),
             _spread(r["added_spread"]), _f(r["ratio"], "{:.3f}")]
            for mode, cases in b["hot"].items() for name, r in cases.items()]
    ops = b["ops"]
    long_rows = []
    for mode, r in b["long"].items():
        if "error" in r:
            long_rows.append([mode, "failed: " + " ".join(r["error"]), "", "", "", ""])
            continue
        rss = r["rss_kib"]
        long_rows.append([mode, f"{r['disk_bytes']:,}", _f(r["disk_bytes"] / ops),
                          " / ".join(f"{rss[k] / 1024:.1f}" for k in ("25%", "50%", "100%")),
                          f"{_f(r['cpu_us_per_op'])} ({_spread(r['cpu_us_per_op_spread'], '{:.2f}')})",
                          _f(b["flush_ns_per_op"].get(mode, float("nan")) / 1e3, "{:.3f}")])
    return (f"## 8. Bounded mode (bench_bounded.py; {b['wrapper']} wrapper)\n\n"
            f"Ring: `--keep-last {b['keep_last']:,}`; steps: `--steps {b['window']}`. Hot path: the same group "
            "through a wrapper recording in full (\"plain\" column) and one recording in that mode, "
            "alternating in blocks; bounded mode works on the flush thread, so the ratio should be 1.\n\n"
            + table(["case (mode)", "full µs", "mode µs", "added µs", "spread µs", "ratio"], rows)
            + f"\n\nA long run per mode (`commtrace run`, one rank, {ops:,} 1-element all_reduces, 20 per "
            "optimizer step; the modes take turns): files on disk at the end, resident memory at 25 / 50 / "
            "100 % of the ops, the process's CPU time per op (all threads), and the flush thread's CPU per op "
            "(timed separately over 20,000 ops).\n\n"
            + table(["mode", "disk bytes", "B/op", "RSS MiB", "CPU µs/op (spread)", "flush µs/op"], long_rows)
            + "\n" + _call_order_line(b.get("call_order_flush_ns_per_op")))


def _call_order_line(order) -> str:
    if not order:
        return ""
    return ("\nThe ring's flush writes records in call order (`capture.bounded.CallOrder`); its flush-thread "
            "CPU per op with it / without it, alternating rounds: "
            + "; ".join(f"{w} wrapper {_f(r['with'] / 1e3, '{:.3f}')} / {_f(r['without'] / 1e3, '{:.3f}')} µs "
                        f"({_f(r['ratio'], '{:.3f}')}×)" for w, r in order.items()) + ".\n")


def section_html(h) -> str:
    rows = []
    pg = h.get("page")
    if pg:
        c = pg["chromium"]
        load = (f"{c['load_s']:.2f} s (full plotly.js: {c.get('full_plotly_load_s', float('nan')):.2f} s)"
                if c.get("available") else f"n/a ({c.get('reason')})")
        rows.append([f"`make demo`-sized: {pg['ops']:,} ops, {pg['ranks']} ranks", f"{pg['write_s']:.2f} s",
                     f"{pg['bytes'] / 1e6:.2f} MB (full plotly.js: {pg.get('full_plotly_bytes', 0) / 1e6:.2f} MB)",
                     load])
    for label, r in (("demo-sized", h["demo"]), ("every op drawn", h["limit"]), ("aggregated", h["big"])):
        c = r["chromium"]
        load = f"{c['load_s']:.2f} s" + (f" ({len(c['problems'])} console problems)" if c["problems"] else "") \
            if c.get("available") else f"n/a ({c.get('reason')})"
        rows.append([f"{label}: {r['ops']:,} ops, {r['ranks']} ranks", f"{r['write_s']:.2f} s",
                     f"{r['bytes'] / 2**20:.1f} MiB", load])
    return ("## 9. HTML report (bench_html.py)\n\n"
            "Synthetic DDP-like runs. Write: `commtrace report RUN --html FILE -q` as a fresh process (read, "
            "analyse, write). Load: headless Chromium (DevTools Protocol over a pipe, network disabled) from "
            "navigating to the file:// URL until the page's script has drawn every figure. Above "
            f"{bench_html_limit()} ops the timeline is aggregated (docs/report.md). Budgets (issue 33): the page of "
            "a `make demo`-sized run ≤ 1.5 MB and loaded in ≤ 1 s; its load time is the median of 5 rounds "
            "alternating with the same page carrying the full plotly.min.js (the browser started once, before).\n\n"
            + table(["run", "write", "page size", "load in Chromium"], rows) + "\n")


def bench_html_limit() -> str:
    from commtrace.render.html_figures import TIMELINE_MAX_OPS
    return f"{TIMELINE_MAX_OPS:,}"


def markdown(res: dict, info: dict, quick: bool) -> str:
    m = info["machine"]
    gtab, _ = goals(res)
    head = [
        "# commtrace benchmarks\n",
        f"Generated by `benchmarks/run_all.py{' --quick' if quick else ''}` on {info['date']} "
        f"in {info['seconds']:.0f} s. Do not edit by hand.\n",
        f"**Machine:** {m['nproc']} CPUs ({m['cpu']}), {(m['mem_bytes'] or 0) / 2**30:.0f} GiB RAM, "
        f"load average {m['loadavg_start'] or 0:.1f} at start, {m['platform']}; Python {m['python']}, "
        f"torch {m['torch']}.\n",
        "**Method:** every overhead figure is measured side by side in one run: the plain and the traced "
        "variant (and torch.profiler where shown) use the same process group and alternate in blocks, so "
        "machine noise hits both alike; figures are the median over blocks of the paired difference or "
        "ratio, with the spread (min..max over blocks). This machine is a shared 2-core VM: small blocking "
        "ops swing by 20-90 µs from wake-up latency, so the *issue cost* (time for an async op to return) "
        "is the cleaner per-op figure. Absolute times are not comparable across runs; ratios and "
        "differences are.\n",
        "**How to reproduce:** `make bench` (≈10 min; `.venv/bin/python benchmarks/run_all.py --quick "
        "--output /tmp/b.md` for ≈2-3 min). Each `benchmarks/bench_*.py` also runs alone (see "
        "benchmarks/README.md).\n",
        "## Goals\n", gtab,
    ]
    body = []
    if "capture" in res:
        body.append(section_capture(res["capture"]))
    if "ddp" in res:
        body.append(section_ddp(res["ddp"]))
    if "runpath" in res:
        body.append(section_run_path(res["runpath"]))
    if "tracesize" in res or "ddp" in res:
        body.append(section_size(res.get("tracesize"), res.get("ddp")))
    if "report" in res:
        body.append(section_report(res["report"]))
    if "profiler" in res:
        body.append(section_profiler(res["profiler"], res.get("ddp")))
    if "mpibackend" in res:
        body.append(section_mpi_backend(res["mpibackend"]))
    if "cuda" in res:
        body.append(section_cuda(res["cuda"]))
    if "bounded" in res:
        body.append(section_bounded(res["bounded"]))
    if "html" in res:
        body.append(section_html(res["html"]))
    if "patch" in res:
        body.append(bench_patch.section(res["patch"]))
    if "scale" in res:
        body.append("## 11. Big runs: partitioned analysis (bench_scale.py)\n\n" + bench_scale.markdown(res["scale"])
                    + "\nThe 10^9-op run: docs/report-performance.md, \"Big runs\".\n")
    if "scale_check" in res:
        body.append("### `commtrace check` on big runs: one frame vs partitioned (bench_scale.py --check)\n\n"
                    + bench_scale.check_markdown(res["scale_check"]))
    if "partialreport" in res:
        body.append("## 12. Partitioned report: exports and windows (bench_partial_report.py)\n\n"
                    + bench_partial_report.markdown(res["partialreport"]))
    if "views" in res:
        body.append("### Partitioned report: timeline and streamed `--events` (bench_views.py)\n\n"
                    + bench_views.markdown(res["views"]))
    if "modules" in res:
        body.append(bench_modules.markdown(res["modules"]))
    errs = info.get("errors") or {}
    if errs:
        body.append("## Errors\n\n" + "\n".join(f"* {k}: `{v}`" for k, v in errs.items()) + "\n")
    return "\n".join(head + body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", default="BENCHMARKS.md")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, smaller runs (~2-3 min)")
    ap.add_argument("--only", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    sections = args.only.split(",") if args.only else list(SECTIONS)
    info = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
            "quick": args.quick, "errors": {}}
    res = {}
    t0 = time.perf_counter()
    for s in sections:
        t = time.perf_counter()
        print(f"== {s} ...", flush=True)
        try:
            res[s] = run_section(s, cfg[s])
        except Exception as e:  # one broken benchmark must not lose the others
            traceback.print_exc()
            info["errors"][s] = f"{type(e).__name__}: {e}"
        print(f"== {s} done in {time.perf_counter() - t:.0f} s", flush=True)
    info["seconds"] = time.perf_counter() - t0
    md = markdown(res, info, args.quick)
    analysis = os.path.join(os.path.dirname(os.path.abspath(__file__)), "analysis.md")
    if os.path.exists(analysis):  # the hand-written "why / what would close it" section
        with open(analysis) as f:
            md = md.rstrip("\n") + "\n\n" + f.read()
    print(md)
    with open(args.output, "w") as f:
        f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"info": info, "results": res}, f, indent=1)
    return 1 if info["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
