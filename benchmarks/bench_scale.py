"""Benchmark the analysis (commtrace.analysis.partitioned.analyse) as the report runs it and in a process pool.

    python benchmarks/bench_scale.py [--ranks 64] [--ops 100000] [--dask] [--kernel-rounds 3] [--json FILE]
    python benchmarks/bench_scale.py --check [--ranks 64] [--ops 100000]   (commtrace check side by side)
    python benchmarks/bench_scale.py --against BASE_CHECKOUT [--rounds 5] [--dir DIR]   (before / after)
    python benchmarks/bench_scale.py --slope 1x1000,1x100000,1x1000000 [--against BASE] [--rounds 3]
                                    (peak memory as a fixed cost + a slope per op)
    python benchmarks/bench_scale.py --big [--big-ranks 1024] [--big-ops 1000000] [--memory-limit 4G] [--dir DIR]
                                    [--commands report,compare,check] [--keep] [--reuse RUN_DIR]

Default: one synthetic run (tests/synthetic.py), analysed in fresh subprocesses by
(a) analyse as `commtrace report` calls it (the run held whole when it fits), (b) analyse in a process
pool of 1 and 2 workers, (c) with --dask, on a distributed.LocalCluster of 1 and 2 worker
processes, (d) the pool x1 and x2 again with the compiled analysis kernels and with numpy's
code (COMMTRACE_NATIVE=0), alternating, --kernel-rounds times (wall and CPU: user + sys of
the analysing process and its workers). Throughput = ops / wall time (summary + skew + step tables); memory = peak
RSS growth of the analysing process over its post-import base, plus the largest
growth of a pool worker (forked from it after the imports) over the same base, per op.

--big: a run of big-ranks x big-ops ops (default 10^9, 52 GB): the synthetic writer writes
64 ranks, the other ranks are copies of those files under their own rank (same ops,
their own meta lines); each of ``--commands`` (report, compare, check; default report)
runs on it as ``commtrace CMD --partitioned --memory-limit`` in a fresh process, and its
exit code, wall time and peak RSS (VmHWM: benchmarks/peak_rss.py) of the process and of
its largest pool worker are recorded. compare compares the run with a second directory
whose ops/spans files are hard links of the first's (no more disk) and whose meta files
are copies. The run is deleted afterwards unless ``--keep``; ``--reuse DIR`` analyses an
existing run instead of generating one.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

CHILD = r"""
import json, resource, sys, time
mode, run_dir, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
from commtrace.analysis.partitioned import analyse
sys.path.insert(0, sys.argv[4])
from peak_rss import peak_rss_kib
base = peak_rss_kib()
from commtrace.analysis import native_ext
native_ext.kernels()     # loading the analysis kernels is part of the imports, as in the CLI
if len(sys.argv) > 5:    # warmed: a small run analysed first, its growth (code pages, first allocations) in the base
    analyse(sys.argv[5], progress=False)
    base = max(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:"))


def cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


cpu0 = cpu_s()
t = time.perf_counter()
if mode == "whole":
    s = analyse(run_dir, progress=False)
    ops = s.ops
elif mode == "pool":
    s = analyse(run_dir, workers=workers, progress=False)
    ops = s.ops
else:
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c) as client:
        t = time.perf_counter()
        s = analyse(run_dir, dask=client, progress=False)
        ops = s.ops
wall = time.perf_counter() - t
cpu = cpu_s() - cpu0
# pool workers are forked from this process after its imports: their growth is over the same base
print(json.dumps({"ops": ops, "wall_s": wall, "cpu_s": cpu, "self_rss": (peak_rss_kib() - base) * 1024,
                  "child_rss": max(0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss - base) * 1024}))
"""


def child(mode: str, run_dir: str, workers: int = 1, env: dict | None = None, warm: str | None = None) -> dict:
    """One analysis in a fresh process (``warm``: a run it analyses first, outside the measurement)."""
    # `python -c` puts its working directory first on sys.path: run it in the tree on PYTHONPATH
    # (else a benchmark started inside a checkout imports that checkout's commtrace, whatever PYTHONPATH says)
    p = subprocess.run([sys.executable, "-c", CHILD, mode, os.path.abspath(run_dir), str(workers),
                        os.path.dirname(os.path.abspath(__file__))] + ([os.path.abspath(warm)] if warm else []),
                       capture_output=True, text=True,
                       env=None if env is None else {**os.environ, **env},
                       cwd=(env or {}).get("PYTHONPATH") or tempfile.gettempdir())
    if p.returncode:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


CASES = {"whole": "as `commtrace report` (analyse, default executor)", "pool": "partitioned, process pool x{w}",
         "dask": "partitioned, Dask LocalCluster, {w} worker process(es)"}


def synthetic_run(root: str, ranks: int, ops: int) -> str:
    """The synthetic run of ``ranks`` x ``ops`` ops under ``root``, written unless it is there."""
    from synthetic import write_synthetic_run
    run_dir = os.path.join(root, f"r{ranks}x{ops}")
    if not os.path.isdir(run_dir):
        write_synthetic_run(run_dir, ranks=ranks, ops_per_rank=ops, seed=0)
    return run_dir


def run(ranks: int, ops: int, dask: bool, workdir: str | None = None, kernel_rounds: int = 3) -> dict:
    """The side-by-side measurement (see the module doc); results by case "mode-workers";
    "kernels": the pool with the compiled analysis kernels and with numpy (kernels_side_by_side)."""
    root = workdir or tempfile.mkdtemp(prefix="commtrace-scale-")
    run = synthetic_run(root, ranks, ops)
    res = {"ranks": ranks, "ops_per_rank": ops, "cpus": os.cpu_count(), "cases": []}
    cases = [("whole", 1), ("pool", 1), ("pool", 2)] + ([("dask", 1), ("dask", 2)] if dask else [])
    for mode, w in cases:
        r = child(mode, run, w)
        res["cases"].append(f"{mode}-{w}")
        res[f"{mode}-{w}"] = {"mode": mode, "workers": w, "ops": r["ops"], "wall_s": r["wall_s"], "ops_per_s": r["ops"] / r["wall_s"],
                              "bytes_per_op": (r["self_rss"] + (r["child_rss"] if mode != "dask" else 0))
                              / r["ops"]}
    res["kernels"] = kernels_side_by_side(run, kernel_rounds)
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
    return res


def kernels_side_by_side(run: str, rounds: int) -> dict | None:
    """The process pool x1 and x2 with the analysis kernels (analysis/native_ext) and with
    numpy's code (COMMTRACE_NATIVE=0), alternating, ``rounds`` times: per case and variant
    the wall and CPU (user + sys of the analysing process and its workers) of each round.
    None where the kernels are not built (both would run numpy)."""
    from commtrace.analysis import native_ext
    if rounds < 1 or native_ext.kernels() is None:
        return None
    out: dict = {"rounds": rounds}
    for w in (1, 2):
        case = out[f"pool-{w}"] = {"kernels": {"wall_s": [], "cpu_s": []}, "numpy": {"wall_s": [], "cpu_s": []}}
        for _ in range(rounds):
            for variant, env in (("numpy", {"COMMTRACE_NATIVE": "0"}), ("kernels", {"COMMTRACE_NATIVE": "1"})):
                r = child("pool", run, w, env)
                case[variant]["wall_s"].append(r["wall_s"])
                case[variant]["cpu_s"].append(r["cpu_s"])
                case[variant]["ops"] = r["ops"]
    return out


def kernels_markdown(k: dict) -> str:
    import numpy as np
    med = lambda xs: float(np.median(xs))           # noqa: E731
    rounds = f"{k['rounds']} round{'s' if k['rounds'] > 1 else ''}"
    lines = [f"\nAnalysis kernels (C++, `commtrace build-native`) vs numpy (`COMMTRACE_NATIVE=0`), {rounds} "
             "alternating, medians (CPU: user + sys of the analysing process and its workers):\n",
             "| case | CPU numpy | CPU kernels | CPU ratio | wall numpy | wall kernels | throughput with kernels |",
             "|---|---|---|---|---|---|---|"]
    for w in (1, 2):
        c = k[f"pool-{w}"]
        nc, kc = med(c["numpy"]["cpu_s"]), med(c["kernels"]["cpu_s"])
        nw, kw = med(c["numpy"]["wall_s"]), med(c["kernels"]["wall_s"])
        lines.append(f"| process pool x{w} | {nc:.2f} s | {kc:.2f} s | {nc / kc:.2f}x | {nw:.2f} s | {kw:.2f} s | "
                     f"{c['kernels']['ops'] / kw / 1e6:.2f} M ops/s |")
    return "\n".join(lines) + "\n"


def markdown(res: dict) -> str:
    """A Markdown table of run()'s results (run_all.py puts it in BENCHMARKS.md)."""
    base = res["whole-1"]["wall_s"]
    lines = [f"{res['ranks']} ranks x {res['ops_per_rank']:,} ops, {res['cpus']} CPUs.\n",
             "| analysis | wall | throughput | vs commtrace report | peak memory |", "|---|---|---|---|---|"]
    for case in res["cases"]:
        r = res[case]
        mem = f"{r['bytes_per_op']:.0f} B/op" if r["mode"] != "dask" else "(in the workers)"
        lines.append(f"| {CASES[r['mode']].format(w=r['workers'])} | {r['wall_s']:.2f} s | "
                     f"{r['ops_per_s'] / 1e6:.2f} M ops/s | {base / r['wall_s']:.2f}x | {mem} |")
    if "dask-2" in res:
        d1, d2 = res["dask-1"], res["dask-2"]
        lines.append(f"\nDask, 2 workers vs 1: {d1['wall_s'] / d2['wall_s']:.2f}x faster; per worker "
                     f"{d1['ops_per_s'] / 1e6:.2f} M ops/s (1 worker), {d2['ops_per_s'] / 2e6:.2f} M ops/s (2 workers).")
    if res.get("kernels"):
        lines.append(kernels_markdown(res["kernels"]))
    return "\n".join(lines) + "\n"


def against(ranks: int, ops: int, base: str, rounds: int, workdir: str | None = None) -> dict:
    """analyse as `commtrace report` runs it (case "whole") from ``base`` (a checkout of another
    commit, first on PYTHONPATH) and from this tree, alternating, ``rounds`` times, on one
    synthetic run: per tree and round the wall, the CPU (user + sys of the process and its
    workers) and the peak memory per op (the module doc's)."""
    root = workdir or tempfile.mkdtemp(prefix="commtrace-scale-")
    run_dir = synthetic_run(root, ranks, ops)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res: dict = {"ranks": ranks, "ops_per_rank": ops, "base": os.path.abspath(base), "before": [], "after": []}
    for i in range(rounds):
        for side, tree in (("before", res["base"]), ("after", here)):
            r = child("whole", run_dir, 1, {"PYTHONPATH": tree, "PYTHONHASHSEED": str(i + 1)})  # as in slope
            res[side].append({"wall_s": r["wall_s"], "cpu_s": r["cpu_s"],
                              "bytes_per_op": (r["self_rss"] + r["child_rss"]) / r["ops"]})
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
    return res


def against_markdown(res: dict) -> str:
    import numpy as np
    med = {s: {k: float(np.median([r[k] for r in res[s]])) for k in ("wall_s", "cpu_s", "bytes_per_op")}
           for s in ("before", "after")}
    b, a = med["before"], med["after"]
    return (f"{res['ranks']} ranks x {res['ops_per_rank']:,} ops, analyse as `commtrace report` runs it, "
            f"{len(res['before'])} rounds alternating, medians (before: {res['base']}):\n\n"
            "| tree | wall | CPU | peak memory |\n|---|---|---|---|\n"
            + "".join(f"| {s} | {m['wall_s']:.2f} s | {m['cpu_s']:.2f} s | {m['bytes_per_op']:.1f} B/op |\n"
                      for s, m in med.items())
            + f"\nafter / before: wall {a['wall_s'] / b['wall_s']:.3f}, CPU {a['cpu_s'] / b['cpu_s']:.3f}\n")


def slope(runs: list, trees: dict, rounds: int, workdir: str | None = None) -> dict:
    """Peak memory growth of analyse (as `commtrace report` runs it) per run of ``runs`` ((ranks, ops per
    rank) pairs) and tree (name -> checkout), fresh processes alternating, ``rounds`` times: as measured
    (over the post-import base) and warmed (over the process's memory after it analysed a 1 x 1,000 run)."""
    root = workdir or tempfile.mkdtemp(prefix="commtrace-scale-")
    warm = synthetic_run(root, 1, 1000)
    res: dict = {"trees": {k: os.path.abspath(v) for k, v in trees.items()}, "runs": []}
    for ranks, ops in runs:
        run_dir, row = synthetic_run(root, ranks, ops), {"ranks": ranks, "ops_per_rank": ops}
        for i in range(rounds):
            for name, tree in res["trees"].items():
                for kind, w in (("cold", None), ("warm", warm)):
                    # round i's hash seed is the same in every tree: set iteration order moves the
                    # 1-rank peak by up to ~1.5 B/op, which random seeds would put between the trees
                    r = child("whole", run_dir, 1, {"PYTHONPATH": tree, "PYTHONHASHSEED": str(i + 1)}, w)
                    row.setdefault(f"{name} {kind}", []).append(r["self_rss"] + r["child_rss"])
                    row.setdefault(f"{name} cpu", []).append(r["cpu_s"]) if kind == "cold" else None
        res["runs"].append(row)
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
    return res


def slope_markdown(res: dict) -> str:
    """Per run and tree the median growth per op (cold / warmed) and CPU; per rank count of several
    runs, the least-squares line growth = fixed + slope x ops through the cold medians."""
    import numpy as np
    med = lambda xs: float(np.median(xs))           # noqa: E731
    names = list(res["trees"])
    out = ["| run | " + " | ".join(f"{n}: B/op (warmed) | {n}: CPU" for n in names) + " |",
           "|---|" + "---|---|" * len(names)]
    for r in res["runs"]:
        n = r["ranks"] * r["ops_per_rank"]
        out.append(f"| {r['ranks']} x {r['ops_per_rank']:,} | " + " | ".join(
            f"{med(r[f'{t} cold']) / n:.1f} ({med(r[f'{t} warm']) / n:.1f}) | {med(r[f'{t} cpu']):.3f} s"
            for t in names)
            + " |")
    for ranks in sorted({r["ranks"] for r in res["runs"]}):
        rows = [r for r in res["runs"] if r["ranks"] == ranks]
        if len(rows) < 2:
            continue
        x = np.array([r["ranks"] * r["ops_per_rank"] for r in rows], float)
        for t in names:
            b, a = np.polyfit(x, [med(r[f"{t} cold"]) for r in rows], 1)
            out.append(f"\n{ranks} rank(s), {t}: growth = {a / 2**20:.1f} MiB + {b:.1f} B x ops")
    return "\n".join(out) + "\n"


def side_by_side(a) -> dict:
    res = run(a.ranks, a.ops, a.dask, a.dir, a.kernel_rounds)
    print(markdown(res))
    return res


CHECK_CHILD = r"""
import json, resource, sys, time
mode, run_dir, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
from commtrace.analysis.check import diagnose
from commtrace.analysis.partitioned.check_map import check_run
from commtrace.trace.reader import load_run
sys.path.insert(0, sys.argv[4])
from peak_rss import peak_rss_kib
base = peak_rss_kib()
from commtrace.analysis import native_ext
native_ext.kernels()     # loading the analysis kernels is part of the imports, as in the CLI


def cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


cpu0 = cpu_s()
t = time.perf_counter()
if mode == "one-frame":
    run = load_run(run_dir)
    findings, ops = diagnose(run), len(run.frame)
else:
    s = check_run(run_dir, workers=workers, progress=False, partitioned=True)
    findings, ops = s.findings, s.ops
wall = time.perf_counter() - t
print(json.dumps({"ops": ops, "wall_s": wall, "self_rss": (peak_rss_kib() - base) * 1024,
                  "child_rss": max(0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss - base) * 1024,
                  "findings": [f.to_dict() for f in findings]}))
"""


def check_side_by_side(ranks: int, ops: int, workdir: str | None = None, cut_rank: int = 3) -> dict:
    """``commtrace check`` on one frame vs partitioned (process pool x1, x2), on the synthetic
    run and on a copy whose rank ``cut_rank`` ops file is cut at a tenth (mid-record):
    throughput, peak memory per op, and whether both give the same findings naming that rank."""
    root = workdir or tempfile.mkdtemp(prefix="commtrace-scale-check-")
    clean = synthetic_run(root, ranks, ops)
    cut = clean + "-cut"
    shutil.rmtree(cut, ignore_errors=True)
    shutil.copytree(clean, cut)
    ops_file = next(os.path.join(cut, f) for f in os.listdir(cut) if f.startswith(f"rank{cut_rank}.")
                    and f.endswith(".ops.bin"))
    os.truncate(ops_file, os.path.getsize(ops_file) // 10 // 32 * 32 + 7)
    here = os.path.dirname(os.path.abspath(__file__))
    res = {"ranks": ranks, "ops_per_rank": ops, "cpus": os.cpu_count(), "cases": [], "cut_rank": cut_rank}
    for name, run_dir in (("clean", clean), ("cut", cut)):
        found = {}
        for mode, w in (("one-frame", 1), ("pool", 1), ("pool", 2)):
            p = subprocess.run([sys.executable, "-c", CHECK_CHILD, mode, run_dir, str(w), here], capture_output=True,
                               text=True)
            if p.returncode:
                raise SystemExit(p.stderr[-3000:])
            r = json.loads(p.stdout.strip().splitlines()[-1])
            found[f"{mode}-{w}"] = r.pop("findings")
            case = f"{name}:{mode}-{w}"
            res["cases"].append(case)
            res[case] = {"mode": mode, "workers": w, "run": name, "ops": r["ops"], "wall_s": r["wall_s"],
                         "ops_per_s": r["ops"] / r["wall_s"],
                         "bytes_per_op": (r["self_rss"] + (r["child_rss"] if w > 1 else 0)) / r["ops"]}
        res[f"{name}:same_findings"] = all(f == found["one-frame-1"] for f in found.values())
        res[f"{name}:errors"] = [f["title"] for f in found["one-frame-1"] if f["severity"] == "error"]
    res["cut:names_rank"] = any(f"rank {cut_rank}" in t for t in res["cut:errors"])
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
    return res


def check_markdown(res: dict) -> str:
    """check_side_by_side()'s table (run_all.py puts it in BENCHMARKS.md)."""
    lines = [f"{res['ranks']} ranks x {res['ops_per_rank']:,} ops, {res['cpus']} CPUs; `cut`: rank {res['cut_rank']}'s "
             "ops file cut at a tenth.\n",
             "| run | check | wall | throughput | vs one frame | peak memory | same findings |", "|---|---|---|---|---|---|---|"]
    for case in res["cases"]:
        r = res[case]
        base = res[f"{r['run']}:one-frame-1"]["wall_s"]
        how = "one frame (load_run + diagnose)" if r["mode"] == "one-frame" else f"partitioned, process pool x{r['workers']}"
        lines.append(f"| {r['run']} | {how} | {r['wall_s']:.2f} s | {r['ops_per_s'] / 1e6:.2f} M ops/s | "
                     f"{base / r['wall_s']:.2f}x | {r['bytes_per_op']:.0f} B/op | "
                     f"{'yes' if res[r['run'] + ':same_findings'] else 'NO'} |")
    lines.append(f"\nOn the cut run both paths name rank {res['cut_rank']}: "
                 f"{'yes' if res['cut:names_rank'] else 'NO'} ({'; '.join(res['cut:errors'][:2])}).")
    return "\n".join(lines) + "\n"


def clone_rank(src_dir: str, src_rank: int, dst_dir: str, rank: int, world: int) -> None:
    """Copy one rank's files under another rank: the ops/spans files unchanged, the meta
    lines naming that rank (header, world, group)."""
    stem = next(f for f in os.listdir(src_dir) if f.startswith(f"rank{src_rank}.") and f.endswith(".meta.jsonl"))
    stem = stem[: -len(".meta.jsonl")]
    new = f"rank{rank}.pid{10_000 + rank}"
    lines = []
    with open(os.path.join(src_dir, stem + ".meta.jsonl")) as f:
        for line in f:
            obj = json.loads(line)
            if obj.get("type") in ("header", "world", "group"):
                obj["rank"] = rank
                if obj.get("type") == "header":
                    obj["pid"] = 10_000 + rank
                if obj.get("type") == "world":
                    obj["world_size"] = world
                if obj.get("type") == "group":
                    obj["size"], obj["ranks"] = world, list(range(world))
            lines.append(json.dumps(obj))
    with open(os.path.join(dst_dir, new + ".meta.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for suffix in (".ops.bin", ".spans.bin"):
        if os.path.exists(os.path.join(src_dir, stem + suffix)):
            shutil.copyfile(os.path.join(src_dir, stem + suffix), os.path.join(dst_dir, new + suffix))


# Runs one CLI command in this fresh process and prints its wall time and peak RSS (VmHWM)
# on stderr; every process-pool worker (forked by multiprocessing) writes its own VmHWM
# to $COMMTRACE_BENCH_HWM/worker.PID when it exits (a multiprocessing finalizer).
CLI_CHILD = r"""
import json, os, sys, time
import multiprocessing.util as mu
sys.path.insert(0, sys.argv[1])
from peak_rss import peak_rss_kib
hwm_dir = os.environ["COMMTRACE_BENCH_HWM"]
def _worker_hwm():
    with open(os.path.join(hwm_dir, f"worker.{os.getpid()}"), "w") as f:
        f.write(str(peak_rss_kib()))
class _Hook:
    pass
_hook = _Hook()
mu.register_after_fork(_hook, lambda _: mu.Finalize(None, _worker_hwm, exitpriority=100))
from commtrace.cli import main
t = time.perf_counter()
try:
    rc = main(sys.argv[2:])
except SystemExit as e:
    rc = e.code if isinstance(e.code, int) else 1
print("BENCH " + json.dumps({"exit": rc, "wall_s": time.perf_counter() - t, "rss_driver": peak_rss_kib() * 1024}),
      file=sys.stderr)
"""

COMMANDS = ("report", "compare", "check")


def run_command(argv: list, workdir: str) -> dict:
    """One ``commtrace`` command in a fresh process: exit code, wall time, peak RSS of the
    process and of its largest pool worker (0: it started none)."""
    hwm = tempfile.mkdtemp(prefix="hwm-", dir=workdir)
    env = dict(os.environ, COMMTRACE_BENCH_HWM=hwm)
    p = subprocess.run([sys.executable, "-c", CLI_CHILD, os.path.dirname(os.path.abspath(__file__)), *argv],
                       capture_output=True, text=True, env=env)
    with open(os.path.join(workdir, f"{argv[0]}.stdout"), "w") as f:   # what the command printed (check's findings)
        f.write(p.stdout)
    line = [x for x in p.stderr.splitlines() if x.startswith("BENCH ")]
    if not line:
        raise SystemExit(f"{' '.join(argv[:2])}: no result\n{p.stderr[-3000:]}")
    res = json.loads(line[-1][len("BENCH "):])
    workers = []
    for name in os.listdir(hwm):
        with open(os.path.join(hwm, name)) as f:
            workers.append(int(f.read()) * 1024)
    shutil.rmtree(hwm, ignore_errors=True)
    res["rss_worker"] = max(workers, default=0)
    res["workers"] = len(workers)
    if res["exit"] not in (0, 1):       # check exits 1 when it finds problems
        said = [x for x in p.stderr.splitlines() if x.strip() and not x.startswith("BENCH ")]
        res["error"] = (said or [""])[-1][:300]
    return res


def linked_copy(run: str, dst: str) -> None:
    """A second run directory for compare without more disk: its ops/spans files are hard
    links of ``run``'s, its meta files copies."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(run):
        src, out = os.path.join(run, name), os.path.join(dst, name)
        if os.path.exists(out):
            continue
        if name.endswith(".meta.jsonl"):
            shutil.copyfile(src, out)
        else:
            os.link(src, out)


def generate_big(run: str, ranks: int, ops: int) -> None:
    """``ranks`` x ``ops`` ops: the synthetic writer writes up to 64 ranks, the other ranks
    are copies of those files under their own rank."""
    from synthetic import write_synthetic_run
    template = run + ".template"
    tpl = min(64, ranks)
    write_synthetic_run(template, ranks=tpl, ops_per_rank=ops, seed=0)
    os.makedirs(run, exist_ok=True)
    for r in range(ranks):
        clone_rank(template, r % tpl, run, r, ranks)
    shutil.rmtree(template)


def big(a) -> dict:
    from commtrace.trace import schema
    root = a.dir or tempfile.mkdtemp(prefix="commtrace-big-")
    os.makedirs(root, exist_ok=True)
    run = os.path.abspath(a.reuse) if a.reuse else os.path.join(root, "big")
    t = time.perf_counter()
    if not a.reuse:
        generate_big(run, a.big_ranks, a.big_ops)
    gen = time.perf_counter() - t
    files = os.listdir(run)
    size = sum(os.path.getsize(os.path.join(run, f)) for f in files)
    ops = sum(os.path.getsize(os.path.join(run, f)) // schema.RECORD_SIZE for f in files
              if f.endswith(schema.OPS_SUFFIX))
    ranks = sum(f.endswith(".meta.jsonl") for f in files)
    commands = [c for c in a.commands.split(",") if c]
    unknown = set(commands) - set(COMMANDS)
    if unknown:
        raise SystemExit(f"--commands: unknown {', '.join(sorted(unknown))} (known: {', '.join(COMMANDS)})")
    second = run.rstrip("/") + "-b"
    opts = ["--partitioned", "--memory-limit", a.memory_limit]
    argvs = {"report": ["report", run, *opts, "--json", os.path.join(root, "report.json"), "-q"],
             "compare": ["compare", run, second, *opts, "--json", os.path.join(root, "compare.json")],
             "check": ["check", run, *opts, "--json"]}
    res = {"ranks": ranks, "ops": ops, "bytes_on_disk": size, "generate_s": gen, "memory_limit": a.memory_limit,
           "commands": {}}
    try:
        for c in commands:
            if c == "compare":
                linked_copy(run, second)
            r = run_command(argvs[c], root)
            r["ops"] = 2 * ops if c == "compare" else ops     # compare reads both runs
            r["ops_per_s"] = r["ops"] / r["wall_s"]
            res["commands"][c] = r
    finally:
        if not a.keep:
            shutil.rmtree(second, ignore_errors=True)
            if not a.reuse:
                shutil.rmtree(run, ignore_errors=True)
    print(big_markdown(res))
    return res


def big_markdown(res: dict) -> str:
    lines = [f"{res['ops']:,} ops ({res['ranks']} ranks; {res['bytes_on_disk'] / 1e9:.1f} GB on disk), "
             f"`--partitioned --memory-limit {res['memory_limit']}`, each command in a fresh process.\n",
             "| command | exit | wall | throughput | peak RSS: process / largest worker |", "|---|---|---|---|---|"]
    for c, r in res["commands"].items():
        lines.append(f"| {c} | {r['exit']}{' (' + r['error'] + ')' if r.get('error') else ''} | {r['wall_s']:.1f} s | "
                     f"{r['ops_per_s'] / 1e6:.2f} M ops/s | {r['rss_driver'] / 2**30:.2f} GiB / "
                     f"{r['rss_worker'] / 2**30:.2f} GiB ({r['workers']} workers) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--ops", type=int, default=100_000, help="ops per rank")
    ap.add_argument("--dask", action="store_true", help="also a Dask LocalCluster with 1 and 2 workers")
    ap.add_argument("--kernel-rounds", type=int, default=3,
                    help="rounds of the pool with the analysis kernels vs numpy (0: not measured)")
    ap.add_argument("--big", action="store_true", help="the 10^9-op run instead (minutes; 32 GB of disk)")
    ap.add_argument("--big-ranks", type=int, default=1024)
    ap.add_argument("--big-ops", type=int, default=1_000_000)
    ap.add_argument("--memory-limit", default="4G")
    ap.add_argument("--commands", default="report", help="--big: CLI commands to run, comma-separated "
                    f"({','.join(COMMANDS)}); compare compares the run with a hard-linked copy of itself")
    ap.add_argument("--keep", action="store_true", help="--big: keep the generated run (and compare's copy)")
    ap.add_argument("--reuse", metavar="DIR", help="--big: analyse this run directory instead of generating one")
    ap.add_argument("--dir", help="work here (default: a temp dir)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--check", action="store_true", help="commtrace check side by side (one frame vs partitioned)")
    ap.add_argument("--against", metavar="BASE", help="the report's analysis from the checkout BASE and from "
                    "this tree, alternating (--rounds times): wall, CPU and memory before / after")
    ap.add_argument("--rounds", type=int, default=5, help="--against: rounds per tree")
    ap.add_argument("--sizes", help="--against: these rank counts one after the other (e.g. 1,2,4,8,64), "
                    "instead of --ranks")
    ap.add_argument("--slope", metavar="RUNS", help="peak memory per op of these runs (RANKSxOPS, comma-separated), "
                    "cold and warmed, fitted as fixed cost + slope per rank count; with --against, both trees")
    a = ap.parse_args()
    if a.slope:
        runs = [tuple(map(int, s.split("x"))) for s in a.slope.split(",")]
        trees = {"base": a.against, "this": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))} \
            if a.against else {"this": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
        res = slope(runs, trees, a.rounds, a.dir)
        print(slope_markdown(res))
    elif a.against:
        res = [against(r, a.ops, a.against, a.rounds, a.dir) for r in map(int, (a.sizes or str(a.ranks)).split(","))]
        print("\n".join(against_markdown(r) for r in res))
        res = res[0] if len(res) == 1 else res
    elif a.check:
        res = check_side_by_side(a.ranks, a.ops, a.dir)
        print(check_markdown(res))
    else:
        res = big(a) if a.big else side_by_side(a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
