"""The ProcessGroupMPI patch's C++ trace writer (patches/commtrace_trace.h): cost per op.

No PyTorch build here, so this times the writer inside tests/cpp/main.cpp, the
test driver that mimics ProcessGroupMPI (a queue, one worker thread, the global
MPI lock, MPI_CHECK) and makes the patch's calls. One thread enqueues N
all_reduces whose MPI call does nothing; per op: the time ``enqueue`` takes on
the calling thread and the time until the worker finished the last one (the
throughput limit, worker included). Three variants alternate, one fresh process
each, rotating which goes first:

* ``off``     -- COMMTRACE_DIR unset: the patch's one branch per op (and per MPI call);
* ``on``      -- tracing into a directory;
* ``blocked`` -- tracing while the flush thread is stuck in ``write()`` (the ops
  file is a full FIFO nobody reads, as on a stalled NFS/Lustre mount): the job's
  threads must not notice.

Figures: medians over repetitions of the per-rep values and of the paired
differences against ``off``, with min..max.

    python benchmarks/bench_patch.py [--ops 20000] [--reps 15] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VARIANTS = ("off", "on", "blocked")
FIGURES = ("enqueue_ns", "total_ns")


def build_driver(out_dir: str) -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        raise RuntimeError("g++ is not installed")
    exe = os.path.join(out_dir, "commtrace_driver")
    subprocess.run([gxx, "-std=c++17", "-O2", "-pthread", f"-I{os.path.join(ROOT, 'patches')}",
                    os.path.join(ROOT, "tests", "cpp", "main.cpp"), "-o", exe], check=True)
    return exe


def drain_fifo(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # no writer left: no wait in open()
    os.set_blocking(fd, True)
    try:
        while os.read(fd, 1 << 16):
            pass
    finally:
        os.close(fd)


def run_once(exe: str, variant: str, ops: int, work: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "COMMTRACE_DIR"}
    run_dir = tempfile.mkdtemp(dir=work)
    if variant != "off":
        env["COMMTRACE_DIR"] = run_dir
    mode = "benchblocked" if variant == "blocked" else "bench"
    proc = subprocess.Popen([exe, mode, "0", str(ops)], env=env, stdout=subprocess.PIPE, text=True)
    killer = threading.Timer(120, proc.kill)
    killer.start()
    result = None
    try:
        for line in proc.stdout:
            if line.startswith("{"):
                result = json.loads(line)  # the last one: after the warm-up's
            elif line.startswith("fifo "):
                drain_fifo(line.split(" ", 1)[1].strip())  # lets the blocked flush thread and the exit finish
        proc.wait()
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(run_dir, ignore_errors=True)
    if proc.returncode != 0 or result is None:
        raise RuntimeError(f"driver {mode} failed (exit {proc.returncode})")
    return result


def run(ops: int = 20000, reps: int = 15) -> dict:
    work = tempfile.mkdtemp(prefix="commtrace-bench-patch-")
    try:
        exe = build_driver(work)
        per = {v: {f: [] for f in FIGURES} for v in VARIANTS}
        for rep in range(reps):
            order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]
            for v in order:
                r = run_once(exe, v, ops, work)
                for f in FIGURES:
                    per[v][f].append(r[f])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"ops": ops, "reps": reps, "variants": {}}
    for v in VARIANTS:
        row = {}
        for f in FIGURES:
            row[f] = statistics.median(per[v][f])
            if v != "off":
                diffs = [a - b for a, b in zip(per[v][f], per["off"][f])]
                row[f + "_added"] = statistics.median(diffs)
                row[f + "_added_spread"] = (min(diffs), max(diffs))
        out["variants"][v] = row
    return out


def section(res: dict) -> str:
    """The BENCHMARKS.md section (run_all.py)."""
    def us(x):
        return f"{x / 1e3:.2f}"
    rows = []
    for v in VARIANTS:
        r = res["variants"][v]
        cells = [v]
        for f in FIGURES:
            cells.append(us(r[f]))
            cells.append("" if v == "off" else
                         f"{r[f + '_added'] / 1e3:+.2f} ({us(r[f + '_added_spread'][0])} .. "
                         f"{us(r[f + '_added_spread'][1])})")
        rows.append(cells)
    head = ["variant", "enqueue µs/op", "added (spread)", "whole op µs/op", "added (spread)"]
    table = "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
                      + ["| " + " | ".join(r) + " |" for r in rows])
    return ("## 10. ProcessGroupMPI patch: C++ trace writer per op (bench_patch.py)\n\n"
            f"The writer in tests/cpp/main.cpp's ProcessGroupMPI stand-in (queue, worker thread, global MPI "
            f"lock, MPI_CHECK); {res['ops']:,} all_reduces with an empty MPI call per process, {res['reps']} "
            "fresh processes per variant, alternating. *enqueue* = time on the calling thread per op; "
            "*whole op* = until the worker finished the last op, per op. *blocked* = tracing while the flush "
            "thread is stuck in `write()` (a full FIFO): nothing on the job's threads waits for the disk. "
            "Medians; added = median of paired differences against *off* (min..max).\n\n" + table + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = run(args.ops, args.reps)
    print(section(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
