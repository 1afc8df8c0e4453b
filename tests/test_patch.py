"""The ProcessGroupMPI patch: its C++ trace writer, the patch file, the make targets.

PyTorch is not built here. The writer (patches/commtrace_trace.h, which the
patch adds to PyTorch as CommtraceTrace.hpp) is compiled with g++ together with
tests/cpp/main.cpp, a driver that mimics ProcessGroupMPI's queue and worker
thread and makes the same tracing calls as the patched ProcessGroupMPI.cpp.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import commtrace
from commtrace.trace import schema

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "patches"
PATCH = PATCHES / "processgroupmpi_commtrace.patch"
HEADER = PATCHES / "commtrace_trace.h"
DRIVER_SRC = ROOT / "tests" / "cpp" / "main.cpp"
TREE_CPP = "torch/csrc/distributed/c10d/ProcessGroupMPI.cpp"
TREE_HPP = "torch/csrc/distributed/c10d/CommtraceTrace.hpp"
RECORD_HEADER = PATCHES / "commtrace_record.h"  # generated from schema.py (commtrace/trace/record_header.py)
TREE_RECORD_H = "torch/csrc/distributed/c10d/commtrace_record.h"

GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ is not installed")


# -- helpers -------------------------------------------------------------------
@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> str:
    if GXX is None:
        pytest.skip("g++ is not installed")
    out = tmp_path_factory.mktemp("cpp") / "commtrace_driver"
    cmd = [GXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-pthread",
           f"-I{PATCHES}", str(DRIVER_SRC), "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return str(out)


def run_driver(driver, mode, rank, run_dir=None, timeout=60):
    env = {k: v for k, v in os.environ.items() if k != schema.ENV_DIR}
    if run_dir is not None:
        env[schema.ENV_DIR] = str(run_dir)
    return subprocess.run([driver, mode, str(rank)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def read_records(path):
    size = os.path.getsize(path)
    assert size % schema.RECORD_SIZE == 0, "torn record"
    return np.fromfile(path, dtype=schema.OP_RECORD)


def read_cpp_files(run_dir):
    """[(stem, meta lines, records)] of the C++ files in run_dir, with numpy + json only."""
    out = []
    for meta_path in sorted(glob.glob(os.path.join(run_dir, "*.cpp" + schema.META_SUFFIX))):
        stem = meta_path[: -len(schema.META_SUFFIX)]
        with open(meta_path, encoding="utf-8") as f:
            meta = [json.loads(line) for line in f if line.strip()]
        out.append((os.path.basename(stem), meta, read_records(stem + schema.OPS_SUFFIX)))
    return out


def mpi_calls(run_dir, stem):
    """The .mpi.bin records of a stem, by (group, seq)."""
    recs = read_records(os.path.join(run_dir, stem + schema.MPI_CALLS_SUFFIX))
    return {(int(r["group"]), int(r["seq"])): r for r in recs}


def by_type(meta, t):
    return [m for m in meta if m["type"] == t]


# -- the C++ writer ------------------------------------------------------------
@needs_gxx
def test_name_mappings(driver):
    res = run_driver(driver, "names", 0)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    ops = {d["title"]: (d["op"], d["variant"]) for d in lines if "title" in d}
    assert ops["mpi:all_reduce"] == ("all_reduce", "mpi:all_reduce")
    assert ops["mpi:_allgather_base"] == ("all_gather", "mpi:_allgather_base")
    assert ops["mpi:_reduce_scatter_base"] == ("reduce_scatter", "mpi:_reduce_scatter_base")
    assert ops["mpi:recvAnySource"] == ("recv", "recv_anysource")
    assert ops["mpi:new_op"] == ("new_op", "mpi:new_op")
    for title, (op, _) in ops.items():
        if title != "mpi:new_op":
            assert op in schema.OPS, title
    dtypes = {d["c10"]: d["dtype"] for d in lines if "c10" in d}
    assert dtypes == {
        "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
        "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
        "Bool": "bool", "ComplexFloat": "complex64", "ComplexDouble": "complex128",
        "UInt16": "uint16", "Float8_e4m3fn": "float8_e4m3fn", "SomethingNew": "somethingnew",
    }


@needs_gxx
def test_basic_trace(driver, tmp_path):
    res = run_driver(driver, "basic", 2, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "enabled=1" in res.stdout
    files = read_cpp_files(tmp_path)
    assert len(files) == 1
    stem, meta, recs = files[0]
    assert re.fullmatch(r"rank2\.pid\d+\.cpp", stem)

    header = meta[0]
    assert header["type"] == "header" and header["format"] == schema.FORMAT_NAME
    assert header["version"] == schema.FORMAT_VERSION and header["source"] == "cpp"
    assert header["rank"] == 2 and stem == f"rank2.pid{header['pid']}.cpp"
    assert header["record_size"] == schema.RECORD_SIZE
    assert isinstance(header["t_mono_ns"], int) and isinstance(header["t_wall_ns"], int)
    assert meta[-1]["type"] == "end"

    (world,) = by_type(meta, "world")
    assert world["rank"] == 2 and world["world_size"] == 4 and world["backend"] == "mpi"
    groups = {g["id"]: g for g in by_type(meta, "group")}
    assert groups[0]["ranks"] == [0, 1, 2, 3] and groups[0]["rank"] == 2 and groups[0]["size"] == 4
    assert groups[1]["ranks"] == [0, 2] and groups[1]["rank"] == 1 and groups[1]["backend"] == "mpi"
    assert groups[1]["name"] != groups[2]["name"]  # same ranks twice: distinct names
    sigs = {s["id"]: s for s in by_type(meta, "sig")}
    assert len(sigs) == 5  # the four all_reduces share one sig
    ar = next(s for s in sigs.values() if s["op"] == "all_reduce")
    assert ar == {"type": "sig", "id": ar["id"], "op": "all_reduce", "variant": "mpi:all_reduce",
                  "shapes": [[4, 4]], "out_shapes": [[4, 4]], "dtype": "float32", "bytes": 64,
                  "out_bytes": 64, "async": True, "device": "cpu"}
    bcast = next(s for s in sigs.values() if s["op"] == "broadcast")
    assert bcast["dtype"] == "int64" and bcast["bytes"] == 80
    barrier = next(s for s in sigs.values() if s["op"] == "barrier")
    assert barrier["shapes"] == [] and barrier["dtype"] is None
    ag = next(s for s in sigs.values() if s["op"] == "all_gather")
    assert ag["variant"] == "mpi:_allgather_base" and ag["out_shapes"] == [[12]]
    assert ag["dtype"] == "bfloat16"
    # every line is of a type schema.py defines, with fields schema.META_FIELDS names
    for m in meta:
        assert m["type"] in schema.META_FIELDS, m
        assert set(m) - {"type"} <= set(schema.META_FIELDS[m["type"]]), m
        assert schema.conform(dict(m)) == 0, m   # each field of its kind: the reader keeps it
    # every line names a sig id it defined before
    seen = set()
    for m in meta:
        if m["type"] == "sig":
            seen.add(m["id"])
        if m["type"] == "error":
            assert m["sig"] in seen

    assert len(recs) == 8
    assert (recs["flags"] & schema.FLAG_SOURCE_MASK == schema.FLAG_SOURCE_CPP).all()
    assert (recs["iteration"] == 0).all()
    assert set(recs["sig"]) <= set(sigs)
    assert set(recs["group"]) == {0, 1, 2}
    w = np.sort(recs[recs["group"] == 0], order="seq")
    assert list(w["seq"]) == [1, 2, 3, 4, 5, 6]
    assert list(w["status"]) == [0, 0, 0, 0, 0, schema.STATUS_FAILED]
    assert (np.diff(w["t_call"]) > 0).all()
    assert (recs["d_return"] >= 0).all() and (recs["d_end"] >= recs["d_return"]).all()
    # op 1 runs 40 ms; op 2, queued right behind it, waits for it in the queue
    assert w["d_end"][0] - w["d_return"][0] >= 35e6
    assert w["d_return"][1] >= 30e6
    (err,) = by_type(meta, "error")
    assert (err["t_call"], err["group"], err["seq"]) == (int(w["t_call"][5]), 0, 6)
    assert err["text"] == 'MPI error in: ProcessGroupMPI.cpp:42, with error code: 15\n"quoted"'
    for g in (1, 2):
        assert list(recs[recs["group"] == g]["seq"]) == [1]

    # .mpi.bin: the MPI call inside each run. The all_gather copies 20 ms in and
    # 30 ms out around a 10 ms MPI call; the failed op's call is stamped too.
    calls = mpi_calls(tmp_path, stem)
    assert set(calls) == {(int(r["group"]), int(r["seq"])) for r in recs}
    for r in recs:
        c = calls[int(r["group"]), int(r["seq"])]
        assert (c["t_call"], c["sig"], c["status"]) == (r["t_call"], r["sig"], r["status"])
        assert r["d_return"] <= c["d_return"] <= c["d_end"] <= r["d_end"]
    ag = calls[0, 5]
    assert ag["d_return"] - w["d_return"][4] >= 18e6           # copy-in (+ lock)
    assert ag["d_end"] - ag["d_return"] >= 8e6                 # the MPI call (the lines around it keep
    #   copy-in and copy-out outside it; an upper bound here failed at load 16-26: 120 ms)
    assert w["d_end"][4] - ag["d_end"] >= 28e6                 # copy-out

    # Times are steady_clock = CLOCK_MONOTONIC, the clock of time.monotonic_ns().
    if sys.platform.startswith("linux"):
        assert abs(int(recs["t_call"].max()) - time.monotonic_ns()) < 60e9


@needs_gxx
def test_disabled_writes_nothing(driver, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != schema.ENV_DIR}
    res = subprocess.run([driver, "basic", "0"], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "enabled=0" in res.stdout
    assert os.listdir(tmp_path) == []


@needs_gxx
def test_unwritable_dir_turns_tracing_off(driver, tmp_path):
    res = run_driver(driver, "basic", 0, tmp_path / "missing" / "dir")
    assert res.returncode == 0, res.stderr
    assert "enabled=0" in res.stdout
    assert "C++ tracing is off" in res.stderr


def _in_flight_seqs_written(run_dir) -> set:
    """The seqs of the IN_FLIGHT records in the C++ ops files so far (a record being written is left out)."""
    out = set()
    for path in glob.glob(os.path.join(run_dir, "*.cpp" + schema.OPS_SUFFIX)):
        with open(path, "rb") as f:
            raw = f.read()
        recs = np.frombuffer(raw[:len(raw) - len(raw) % schema.RECORD_SIZE], dtype=schema.OP_RECORD)
        out |= {int(s) for s in recs["seq"][recs["status"] == schema.STATUS_IN_FLIGHT]}
    return out


@needs_gxx
def test_sigkill_keeps_completed_ops_and_in_flight(driver, tmp_path):
    env = {k: v for k, v in os.environ.items()}
    env[schema.ENV_DIR] = str(tmp_path)
    proc = subprocess.Popen([driver, "hang", "0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        # SIGKILL once the flush thread has written both ops IN_FLIGHT (> 1 s in flight, then its
        # next 0.5 s flush): a fixed sleep of 1.8 s left 0.3 s for that on a loaded machine.
        deadline = time.monotonic() + 60
        while not {2, 3} <= _in_flight_seqs_written(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    (stem, meta, recs) = read_cpp_files(tmp_path)[0]
    assert "end" not in [m["type"] for m in meta]
    done = recs[recs["seq"] == 1]
    assert list(done["status"]) == [schema.STATUS_COMPLETED]
    stuck = recs[recs["seq"] == 2]   # dequeued, blocked in "MPI"
    assert len(stuck) >= 1 and (stuck["status"] == schema.STATUS_IN_FLIGHT).all()
    assert np.isfinite(stuck["d_return"]).all() and np.isnan(stuck["d_end"]).all()
    queued = recs[recs["seq"] == 3]  # never left the queue
    assert len(queued) >= 1 and (queued["status"] == schema.STATUS_IN_FLIGHT).all()
    assert np.isnan(queued["d_return"]).all() and np.isnan(queued["d_end"]).all()


@needs_gxx
def test_threads_stress(driver, tmp_path):
    res = run_driver(driver, "stress", 5, tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    (stem, meta, recs) = read_cpp_files(tmp_path)[0]
    assert stem.startswith("rank5.")
    assert len(recs) == 8 * 200
    assert (recs["status"] == schema.STATUS_COMPLETED).all()
    for g in range(3):
        seqs = np.sort(recs["seq"][recs["group"] == g])
        assert list(seqs) == list(range(1, len(seqs) + 1))
    sigs = by_type(meta, "sig")
    assert len({s["id"] for s in sigs}) == len(sigs)
    keys = {json.dumps({k: v for k, v in s.items() if k != "id"}, sort_keys=True) for s in sigs}
    assert len(keys) == len(sigs)  # interned: no duplicate descriptions
    assert set(recs["sig"]) == {s["id"] for s in sigs}


@needs_gxx
def test_global_lock_wait_is_not_mpi_time(driver, tmp_path):
    """A blocking recv's wait holds the global MPI lock on the caller's thread for
    300 ms while an all_reduce is queued: the split puts that in pre_mpi_ns (lock
    wait + copies), not in mpi_ns; the recv's own MPI_CHECK stamps nothing."""
    res = run_driver(driver, "lockwait", 0, tmp_path)
    assert res.returncode == 0, res.stderr
    (stem, meta, recs) = read_cpp_files(tmp_path)[0]
    assert list(recs["seq"]) == [1, 2]
    calls = mpi_calls(tmp_path, stem)
    assert set(calls) == {(0, 1), (0, 2)}
    blocked, free = recs[1], recs[0]
    pre = calls[0, 2]["d_return"] - blocked["d_return"]
    mpi = calls[0, 2]["d_end"] - calls[0, 2]["d_return"]
    # (no upper bound on the MPI call or the free op's wait: under load a call stamped long is no bug)
    assert pre >= 250e6 and mpi >= 0
    assert calls[0, 1]["d_return"] >= free["d_return"]

    ops = commtrace.load(str(tmp_path)).sort_values("seq")
    assert list(ops["source"]) == ["cpp", "cpp"]
    row = ops.iloc[1]
    assert row["pre_mpi_ns"] >= 250e6 and row["mpi_ns"] >= 0
    # run_ns is the whole worker-side time: pre + mpi + post, each = the stamps' differences
    for _, r in ops.iterrows():
        assert r["run_ns"] == pytest.approx(r["pre_mpi_ns"] + r["mpi_ns"] + r["post_mpi_ns"], abs=2)
        assert r["queue_wait_ns"] == r["t_dequeue_ns"] - r["t_enqueue_ns"]
        assert r["mpi_ns"] == r["t_mpi_end_ns"] - r["t_mpi_begin_ns"]


def read_fifo(path: str) -> bytes:
    """Everything written to a FIFO until its writers close it (no writer: b"" at once)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never blocks in open()
    os.set_blocking(fd, True)
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _drain_fifo_run(driver, mode, run_dir, timeout=60):
    """Runs a FIFO mode of the driver: the test is the (late) reader of the ops
    FIFO; returns (stdout lines, the bytes the tracer wrote to it). A hang (what
    I/O under the ops' mutex, or a child blocking on an inherited lock, would
    cause) is killed after ``timeout`` s and fails the test."""
    env = {**os.environ, schema.ENV_DIR: str(run_dir)}
    proc = subprocess.Popen([driver, mode, "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    lines, data = [], b""
    try:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("fifo "):
                data = read_fifo(line.split(" ", 1)[1].strip())  # until the driver exits (its final flush)
        proc.wait()
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (f"driver {mode}: exit {proc.returncode} (killed after {timeout} s: a hang?)",
                                  lines, proc.stderr.read())
    return lines, data


@needs_gxx
def test_slow_writer_does_not_block_ops(driver, tmp_path):
    """The ops file is a FIFO nobody reads: the flush thread blocks in write()
    with a full pipe. 2000 more ops are enqueued and run meanwhile (with I/O
    under the ops' mutex they would wait for the reader: a hang). Nothing is
    lost once the reader drains the FIFO."""
    lines, data = _drain_fifo_run(driver, "slowio", tmp_path)
    assert "flusher_blocked" in lines
    assert any(x.startswith("ops_done") for x in lines)
    recs = np.frombuffer(data, dtype=schema.OP_RECORD)
    meta = [json.loads(x) for x in open(glob.glob(str(tmp_path / "*.cpp.meta.jsonl"))[0])]
    sig_op = {m["id"]: m["op"] for m in by_type(meta, "sig")}
    ops = [sig_op[int(s)] for s in recs["sig"]]
    assert ops.count("broadcast") == 2000
    assert list(recs["seq"]) == list(range(1, len(recs) + 1))
    assert (recs["status"] == schema.STATUS_COMPLETED).all()
    assert meta[-1]["type"] == "end"


@needs_gxx
def test_fork_child_exits_while_flusher_writes(driver, tmp_path):
    """fork() while the parent's flush thread is blocked in write() holding the
    tracer's I/O lock: the child uses the group and exits (atexit -> close())
    without taking any tracer lock, records nothing, writes no file; the parent's
    trace is complete."""
    lines, data = _drain_fifo_run(driver, "fork", tmp_path)
    assert "child_enabled=0 child_token=0" in lines
    (status,) = [x for x in lines if x.startswith("child_pid=")]
    child_pid = int(status.split()[0].split("=")[1])
    assert status.endswith("child=exited"), status
    assert not [f for f in os.listdir(tmp_path) if f".pid{child_pid}." in f]
    recs = np.frombuffer(data, dtype=schema.OP_RECORD)
    assert list(recs["seq"]) == list(range(1, len(recs) + 1))  # only the parent's ops
    meta = [json.loads(x) for x in open(glob.glob(str(tmp_path / "*.cpp.meta.jsonl"))[0])]
    assert meta[-1]["type"] == "end" and len(by_type(meta, "group")) == 1


@needs_gxx
def test_group_destroy_recreate_and_id_limit(driver, tmp_path):
    """A group re-created at a destroyed group's address is a new group (new id,
    seq from 1); an address whose group was destroyed is not traced; group ids
    are never reused, and groups beyond the 65,536 a uint16 id can name are not
    traced (one line on stderr)."""
    res = run_driver(driver, "groups", 0, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "more than 65536 process groups" in res.stderr
    (stem, meta, recs) = read_cpp_files(tmp_path)[0]
    groups = by_type(meta, "group")
    ids = [g["id"] for g in groups]
    assert ids == list(range(65536))
    assert groups[0]["name"] == "mpi:[0,1]" and groups[1]["name"] == "mpi:[0,1]#1"
    assert sorted(zip(recs["group"].tolist(), recs["seq"].tolist())) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    sig_op = {m["id"]: m["op"] for m in by_type(meta, "sig")}
    assert {sig_op[int(s)] for s in recs["sig"]} == {"all_reduce"}  # neither barrier


@needs_gxx
@pytest.mark.skipif(not hasattr(commtrace, "load"), reason="commtrace.load (the reader) is not there yet")
def test_reader_loads_cpp_files(driver, tmp_path):
    res = run_driver(driver, "basic", 0, tmp_path)
    assert res.returncode == 0, res.stderr
    t = commtrace.load(str(tmp_path))
    ops = getattr(t, "ops", t)  # a Trace with .ops, or the frame itself
    assert len(ops) == 8
    assert set(ops["source"]) == {"cpp"}
    assert set(ops["op"]) == {"all_reduce", "broadcast", "barrier", "all_gather", "reduce_scatter"}
    failed = ops[ops["status"] == "failed"]
    assert len(failed) == 1 and failed["op"].iloc[0] == "all_reduce"


@needs_gxx
def test_recv_from_any_source_names_its_sender(driver, tmp_path):
    """recvAnysource (not queued: the caller's wait() / isCompleted() finds it done) is recorded
    from its call to its completion, its seqs its own (the collectives' stay every member's),
    and a ``source`` line names the GLOBAL rank it received from (MPI_SOURCE is the group's),
    which commtrace.load shows as the recv's root; a failed one names none, one never
    completed is written in flight."""
    res = run_driver(driver, "anysource", 0, tmp_path)
    assert res.returncode == 0, res.stderr
    ((stem, meta, recs),) = read_cpp_files(tmp_path)
    recv_sig = {m["id"] for m in by_type(meta, "sig") if m["variant"] == "recv_anysource"}
    assert [m["op"] for m in by_type(meta, "sig") if m["id"] in recv_sig] == ["recv"]
    sources = by_type(meta, "source")
    assert [(s["group"], s["seq"], s["src"]) for s in sources] == [(0, 1, 2), (1, 1, 3)]
    recv = recs[np.isin(recs["sig"], list(recv_sig))]
    assert {int(s["t_call"]) for s in sources} <= {int(t) for t in recv["t_call"]}
    assert np.isnan(recv["d_return"]).all()           # not queued: no dequeue
    coll = recs[~np.isin(recs["sig"], list(recv_sig))]
    assert sorted((int(r["group"]), int(r["seq"])) for r in coll) == [(0, 1), (0, 2), (1, 1)]

    ops = commtrace.load(str(tmp_path))
    ops = getattr(ops, "ops", ops)
    got = ops[ops["variant"] == "recv_anysource"].sort_values("t_start_ns")
    assert [(str(g), int(q), st, None if pd.isna(r) else int(r))
            for g, q, st, r in zip(got["group"], got["seq"], got["status"], got["root"])] == [
        ("mpi:[0,1,2,3]", 1, "completed", 2), ("mpi:[0,2,3]", 1, "completed", 3),
        ("mpi:[0,2,3]", 2, "failed", None), ("mpi:[0,1,2,3]", 2, "in_flight", None)]


@needs_gxx
@pytest.mark.skipif(not hasattr(commtrace, "load"), reason="commtrace.load (the reader) is not there yet")
def test_reader_merges_cpp_into_python_rows(driver, tmp_path):
    """A Python-layer file of the same process: the world-group ops appear once, with the split."""
    from commtrace.trace.writer import TraceWriter

    res = run_driver(driver, "basic", 0, tmp_path)
    assert res.returncode == 0, res.stderr
    (stem, meta, recs) = read_cpp_files(tmp_path)[0]
    pid = meta[0]["pid"]
    world_ops = np.sort(recs[recs["group"] == 0], order="seq")
    sig_op = {m["id"]: m["op"] for m in by_type(meta, "sig")}
    py_sigs, rows = {}, []
    for r in world_ops:
        op = sig_op[int(r["sig"])]
        sid = py_sigs.setdefault(op, len(py_sigs))
        rows.append((int(r["t_call"]) - 2000, 1500.0, float(r["d_end"]) + 5000, int(r["seq"]), sid,
                     0, 0, int(r["status"]), schema.FLAG_SOURCE_PYTHON))
    w = TraceWriter(str(tmp_path), f"rank0.pid{pid}")
    header = {"type": "header", "format": schema.FORMAT_NAME, "version": schema.FORMAT_VERSION,
              "source": "python", "pid": pid, "rank": 0, "host": meta[0]["host"],
              "t_wall_ns": meta[0]["t_wall_ns"], "t_mono_ns": meta[0]["t_mono_ns"]}
    lines = [header,
             {"type": "world", "world": 0, "world_id": "w0", "rank": 0, "world_size": 4, "backend": "mpi"},
             {"type": "group", "id": 0, "world": 0, "world_id": "w0", "name": "0", "backend": "mpi",
              "size": 4, "rank": 0, "ranks": [0, 1, 2, 3]}]
    lines += [{"type": "sig", "id": sid, "op": op, "variant": op} for op, sid in py_sigs.items()]
    lines.append({"type": "end", "exit_code": 0, "how": "exit", "t_wall_ns": 0, "t_mono_ns": 0})
    w.write(lines, np.array(rows, dtype=schema.OP_RECORD))
    w.close()

    t = commtrace.load(str(tmp_path))
    ops = getattr(t, "ops", t)
    py = ops[ops["source"] == "python"].sort_values("seq")
    assert len(py) == 6 and py["queue_wait_ns"].notna().all() and py["mpi_ns"].notna().all()
    assert py["queue_wait_ns"].iloc[1] >= 30e6   # the all_reduce queued behind the 40 ms one
    assert py["mpi_ns"].iloc[0] >= 35e6          # its 40 ms MPI call
    ag = py.iloc[4]                              # 20 ms copy-in, 10 ms MPI, 30 ms copy-out
    assert ag["pre_mpi_ns"] >= 18e6 and ag["mpi_ns"] >= 8e6 and ag["post_mpi_ns"] >= 28e6
    assert ag["run_ns"] >= 58e6
    cpp = ops[ops["source"] == "cpp"]
    assert len(cpp) == 2 and set(cpp["op"]) == {"all_reduce", "reduce_scatter"}  # subgroups: C++ only


# -- the patch file -----------------------------------------------------------
def parse_patch(text):
    """{path: [hunks]} where a hunk is (old_start, old_len, new_start, new_len, lines)."""
    files, cur = {}, None
    lines = text.split("\n")
    assert lines[-1] == ""  # ends with a newline
    i = 0
    while i < len(lines) - 1:
        ln = lines[i]
        if ln.startswith("diff --git "):
            m = re.fullmatch(r"diff --git a/(\S+) b/(\S+)", ln)
            assert m and m.group(1) == m.group(2), ln
            cur = files.setdefault(m.group(2), [])
            i += 1
            continue
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", ln)
        if m:
            o0, ol, n0, nl = (int(m.group(1)), int(m.group(2) or 1), int(m.group(3)), int(m.group(4) or 1))
            body, i = [], i + 1
            old = new = 0
            while i < len(lines) - 1 and (old < ol or new < nl):
                b = lines[i]
                assert b[:1] in (" ", "+", "-"), f"bad hunk line {b!r}"
                old += b[0] in " -"
                new += b[0] in " +"
                body.append(b)
                i += 1
            assert (old, new) == (ol, nl), f"hunk counts wrong at {ln}"
            cur.append((o0, ol, n0, nl, body))
            continue
        i += 1
    return files


def test_patch_is_wellformed_and_touches_only_its_files():
    text = PATCH.read_text()
    files = parse_patch(text)
    assert set(files) == {TREE_CPP, TREE_HPP, TREE_RECORD_H}
    assert "--- /dev/null" in text
    # The headers in the patch are byte-for-byte patches/commtrace_trace.h and commtrace_record.h.
    for tree_path, here in ((TREE_HPP, HEADER), (TREE_RECORD_H, RECORD_HEADER)):
        assert re.search(rf"^diff --git a/{tree_path} b/{tree_path}\nnew file mode 100644\n", text, re.M)
        (hunk,) = files[tree_path]
        assert "\n".join(b[1:] for b in hunk[4]) + "\n" == here.read_text()
    res = subprocess.run([sys.executable, str(PATCHES / "make_patch.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    # ProcessGroupMPI.cpp: small, additive, every added line is about commtrace or plumbing.
    hunks = files[TREE_CPP]
    added = [b[1:] for h in hunks for b in h[4] if b.startswith("+")]
    removed = [b[1:] for h in hunks for b in h[4] if b.startswith("-")]
    assert len(hunks) == 8 and len(added) <= 65
    assert removed == ["  return c10::make_intrusive<ProcessGroupMPI>(rank, size, groupComm);",
                       "  return c10::make_intrusive<AsyncWork>("]
    assert "#include <torch/csrc/distributed/c10d/CommtraceTrace.hpp>" in added
    assert "  if (commtrace::enabled()) {" in added  # the one branch per op
    assert "  commtrace::unregisterGroup(this); // commtrace: forget the destroyed group" in added
    # recvAnysource registers its AsyncWork; both places its request completes report the status
    assert "    commtrace::onAnySourceRecv(this, work.get(), desc);" in added
    assert sum("commtrace::onWorkDone(" in a for a in added) == 2
    # MPI_CHECK's block starts with the stamp; the macro keeps its backslash column
    (stamp,) = [a for a in added if "MpiCallScope" in a]
    assert stamp.rstrip("\\").strip() == "commtrace::MpiCallScope commtraceMpiCall;"
    macro = [b[1:] for h in hunks for b in h[4] if "MPI_CHECK(cmd)" in b or "MpiCallScope" in b]
    assert len({len(x) for x in macro}) == 1
    assert not any("\t" in a for a in added)
    assert all(len(a) <= 80 for a in added)  # clang-format column limit


def test_patch_applies_to_its_own_preimage(tmp_path):
    """git apply --check/apply/--reverse on a file made of the hunks' context (git allows offsets)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    files = parse_patch(PATCH.read_text())
    repo = tmp_path / "pytorch"
    target = repo / TREE_CPP
    target.parent.mkdir(parents=True)
    pre = []
    for _, _, _, _, body in files[TREE_CPP]:
        pre += [b[1:] for b in body if b[0] in " -"] + ["// (elided)"]
    target.write_text("\n".join(pre) + "\n")
    git = ["git", "-C", str(repo)]
    subprocess.run(git + ["init", "-q"], check=True)
    for args in (["apply", "--check", str(PATCH)], ["apply", str(PATCH)],
                 ["apply", "--reverse", "--check", str(PATCH)]):
        res = subprocess.run(git + args, capture_output=True, text=True)
        assert res.returncode == 0, (args, res.stderr)
    assert "commtrace::wrapRun" in target.read_text()
    assert (repo / TREE_HPP).read_text() == HEADER.read_text()
    assert (repo / TREE_RECORD_H).read_text() == RECORD_HEADER.read_text()


def test_patched_code_compiles_against_the_wheel_headers(tmp_path):
    """The patch's added code, as it will sit in ProcessGroupMPI.cpp (the header
    at its tree path, the MPI_CHECK macro with the stamp, the create / destructor
    / enqueue additions in functions with the same names in scope), compiles as
    C++20 -- how the torch wheel is built -- against the installed wheel's
    headers and the venv's MPI, warnings as errors for commtrace's code."""
    mpicxx = shutil.which("mpicxx") or os.path.join(os.path.dirname(sys.executable), "mpicxx")
    include = Path(torch_include_dir())
    if not os.path.exists(mpicxx) or not (include / "torch/csrc/distributed/c10d/ProcessGroupMPI.hpp").exists():
        pytest.skip("needs mpicxx and the torch wheel's headers")
    files = parse_patch(PATCH.read_text())
    for tree_path in (TREE_HPP, TREE_RECORD_H):  # the headers the patch adds, as it adds them
        (hunk,) = files[tree_path]
        (tmp_path / tree_path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / tree_path).write_text("\n".join(b[1:] for b in hunk[4]) + "\n")
    hunks = [h[4] for h in files[TREE_CPP]]
    added = [[b[1:] for b in h if b.startswith("+")] for h in hunks]
    includes, _, completed, waited, create, destructor, enqueue, _ = added
    plus = [i for i, b in enumerate(hunks[7]) if b.startswith("+")]   # recvAnysource: its AsyncWork .. return
    recv_any = [b[1:] for b in hunks[7][plus[0]:plus[-1] + 1] if b[:1] in " +"]
    macro = [b[1:] for b in hunks[1] if b[:1] in " +" and b[1:].strip()]
    assert macro[0].startswith("#define MPI_CHECK(cmd)")
    rest_of_macro = ['          std::to_string(__LINE__) + ", with error code: " +  \\',
                     "          std::to_string(mpiStatus);                          \\",
                     "      TORCH_CHECK(false, err);                                \\",
                     "    }                                                         \\",
                     "  } while (0)"]
    tu = ["#include <torch/csrc/distributed/c10d/ProcessGroupMPI.hpp>", *includes, "namespace c10d {",
          *macro, *rest_of_macro,
          "struct PatchedBits {",
          "  static std::mutex pgGlobalMutex_;",
          "  c10::intrusive_ptr<ProcessGroupMPI> create(",
          "      std::vector<int> ranks, int rank, int size, MPI_Comm groupComm) {", *create, "  }",
          "  ~PatchedBits() {", *destructor, "  }",
          "  void enqueue(std::unique_ptr<WorkEntry> entry, const char* profilingTitle,",
          "               const std::optional<std::vector<at::Tensor>>& inputTensors) {", *enqueue, "  }",
          "  using AsyncWork = ProcessGroupMPI::AsyncWork;",
          "  c10::intrusive_ptr<Work> recvAnysource(std::vector<at::Tensor>& tensors, MPI_Request request) {",
          "    auto& tensor = tensors[0];", *recv_any, "  }",
          "};",
          "struct PatchedAsyncWork {  // AsyncWork::isCompleted and wait, where their hunks sit",
          "  MPI_Status status_{};",
          "  bool isCompleted() {", *completed, "    return true;", "  }",
          "  bool wait() {", "    auto ok = (status_.MPI_ERROR == MPI_SUCCESS);", *waited, "    return ok;", "  }",
          "};", "}  // namespace c10d", ""]
    src = tmp_path / "patched_bits.cpp"
    src.write_text("\n".join(tu))
    cmd = [mpicxx, "-std=c++20", "-fsyntax-only", "-DUSE_C10D_MPI", "-Wall", "-Wextra", "-Werror",
           f"-I{tmp_path}", "-isystem", str(include), "-isystem", str(include / "torch/csrc/api/include"), str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


def torch_include_dir() -> str:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    return os.path.join(os.path.dirname(spec.origin), "include") if spec and spec.origin else ""


# -- make targets ---------------------------------------------------------------
def make_dry_run(target, *extra):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    top = ROOT / "Makefile"
    uses_top = top.exists() and "patches/patch.mk" in top.read_text()
    cmd = ["make", "-n", target, *extra] if uses_top else ["make", "-n", "-f", "patches/patch.mk", target, *extra]
    # The Makefile's defaults, whatever make ran pytest: `make test TORCH=2.x.y` passes
    # TORCH=... down to every child make through MAKEFLAGS, which would pin that torch here.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TORCH")}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)


def test_make_n_patch_build():
    res = make_dry_run("patch-build")
    assert res.returncode == 0, res.stderr
    assert "pytorch_build.sh build" in res.stdout
    assert "PYTORCH_TAG='v2.13.0'" in res.stdout and "USE_CUDA='0'" in res.stdout
    res = make_dry_run("patch-build", "PYTORCH_SRC=/src/pytorch", "USE_CUDA=1", "MAX_JOBS=3")
    assert res.returncode == 0, res.stderr
    assert "PYTORCH_SRC='/src/pytorch'" in res.stdout and "USE_CUDA='1'" in res.stdout
    assert "MAX_JOBS='3'" in res.stdout
    for target, verb in (("patch-check", "check"), ("patch-revert", "revert")):
        res = make_dry_run(target)
        assert res.returncode == 0 and f"pytorch_build.sh {verb}" in res.stdout


def test_build_script_syntax_and_usage():
    script = PATCHES / "pytorch_build.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert res.returncode == 2 and "usage" in res.stderr


def test_prereqs_fail_early_with_clear_message(tmp_path):
    """With no MPI wrappers on PATH the prerequisite check names them and fails."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "git", "gcc", "g++", "df", "awk", "sort", "head", "dirname", "mktemp",
                 "rm", "tr", "grep", "nproc", "cat", "cc1", "as", "ld"):
        p = shutil.which(tool)
        if p:
            os.symlink(p, bindir / tool)
    # PYTHON's directory goes on PATH (cmake/ninja/mpicc may come from the venv): keep it ours.
    os.symlink(sys.executable, bindir / "python")
    env = {"PATH": str(bindir), "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHON": str(bindir / "python"), "PYTORCH_SRC": str(tmp_path / "src"), "MIN_FREE_GB": "0"}
    res = subprocess.run([str(bindir / "bash"), str(PATCHES / "pytorch_build.sh"), "prereqs"],
                         env=env, capture_output=True, text=True, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert re.search(r"MISSING\s+mpicc", out) and re.search(r"MISSING\s+mpicxx", out)
    assert re.search(r"MISSING\s+mpi\.h", out)
    assert "missing prerequisites" in out
    assert re.search(r"ok\s+disk", out)


def test_make_n_patch_uninstall_and_prepare():
    res = make_dry_run("patch-uninstall")
    assert res.returncode == 0, res.stderr
    assert re.search(r"-m pip install --force-reinstall --no-deps 'torch==2\.13\.0'", res.stdout)
    res = make_dry_run("patch-prepare", "PYTORCH_OFFLINE=1", "PYTORCH_URL=/mirror/pytorch.git")
    assert res.returncode == 0, res.stderr
    assert "pytorch_build.sh prepare" in res.stdout
    assert "PYTORCH_OFFLINE='1'" in res.stdout and "PYTORCH_URL='/mirror/pytorch.git'" in res.stdout


# -- pytorch_build.sh offline, against a fake source tree laid out like PyTorch's --
def fake_pytorch_tree(root: Path, version="2.13.0", submodule=True) -> Path:
    """What the script looks at in a PyTorch tree: ProcessGroupMPI.cpp (the patch's
    preimage), version.txt, setup.py, requirements.txt, CMakeLists.txt's compiler
    check, .gitmodules and a submodule directory."""
    files = parse_patch(PATCH.read_text())
    cpp = root / TREE_CPP
    cpp.parent.mkdir(parents=True)
    pre = []
    for _, _, _, _, body in files[TREE_CPP]:
        pre += [b[1:] for b in body if b[0] in " -"] + ["// (elided)"]
    cpp.write_text("\n".join(pre) + "\n")
    (root / "version.txt").write_text(version + "\n")
    (root / "setup.py").write_text("raise SystemExit('a fake tree: not buildable')\n")
    # A requirement no machine has, so pip runs wherever the test does (a GPU machine's
    # Python may already hold cmake, ninja and numpy, and the script then skips pip).
    (root / "requirements.txt").write_text(
        "# build requirements\ncmake>=3.27\nninja\nnumpy\ncommtrace-test-build-requirement\n")
    (root / "CMakeLists.txt").write_text(
        'if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 9.3)\n'
        '  message(FATAL_ERROR "GCC 9.3 or newer is required")\nendif()\n')
    (root / ".gitmodules").write_text(
        '[submodule "third_party/pybind11"]\n\tpath = third_party/pybind11\n'
        '\turl = https://github.com/pybind/pybind11.git\n')
    (root / "third_party" / "pybind11").mkdir(parents=True)
    if submodule:
        (root / "third_party" / "pybind11" / "CMakeLists.txt").write_text("# pybind11\n")
    return root


def offline_env(tmp_path: Path) -> tuple[dict, Path]:
    """PATH with shims: git fails loudly on any network operation (clone of a
    local path is allowed), curl/wget always; PYTHON is a wrapper whose `-m pip`
    logs its arguments: `pip install -r` stands for an install from the
    wheelhouse (it puts cmake 3.31 and ninja next to PYTHON, as pip would into
    the venv), `pip install ... .` is the compile (it stops there)."""
    shims = tmp_path / "shims"
    shims.mkdir()
    log = tmp_path / "calls.log"
    git = shutil.which("git")
    (shims / "git").write_text(f"""#!/bin/bash
for a in "$@"; do
  case "$a" in
    fetch|pull|ls-remote|submodule|http://*|https://*|ssh://*|git://*|git@*)
      echo "NETWORK: git $*" >> {log}; echo "NETWORK ATTEMPT: git $*" >&2; exit 97 ;;
  esac
done
exec {git} "$@"
""")
    for tool in ("curl", "wget"):
        (shims / tool).write_text(f'#!/bin/bash\necho "NETWORK: {tool} $*" >> {log}\nexit 97\n')
    (shims / "python").write_text(f"""#!/bin/bash
if [ "$1" = -m ] && [ "$2" = pip ]; then
  echo "pip ${{*:3}} | cwd=$PWD USE_MPI=${{USE_MPI:-}} MAX_JOBS=${{MAX_JOBS:-}} PIP_NO_INDEX=${{PIP_NO_INDEX:-}} PIP_FIND_LINKS=${{PIP_FIND_LINKS:-}}" >> {log}
  case " $* " in
    *" -r "*)
      printf '#!/bin/sh\\necho "cmake version 3.31.6"\\n' > {shims}/cmake
      printf '#!/bin/sh\\necho 1.12.1\\n' > {shims}/ninja
      chmod +x {shims}/cmake {shims}/ninja; exit 0 ;;
    *" --no-build-isolation "*) echo "FAKE COMPILE"; exit 0 ;;
  esac
  exit 97
fi
exec {sys.executable} "$@"
""")
    for f in shims.iterdir():
        f.chmod(0o755)
    venv_bin = os.path.dirname(sys.executable)
    env = {"PATH": f"{shims}:{venv_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHON": str(shims / "python"), "MIN_FREE_GB": "0", "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(tmp_path / "wheelhouse"), "GIT_ALLOW_PROTOCOL": "file",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return env, log


def build_script(verb, env, **extra):
    return subprocess.run(["bash", str(PATCHES / "pytorch_build.sh"), verb], env={**env, **extra},
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def network_calls(log: Path) -> list[str]:
    return [x for x in (log.read_text().splitlines() if log.exists() else []) if x.startswith("NETWORK")]


needs_build_tools = pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("make") is None or shutil.which("mpicc") is None
    and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpicc")),
    reason="needs git, make and an MPI compiler wrapper")


@needs_build_tools
def test_patch_build_offline_tarball_tree(tmp_path):
    """`make patch-build PYTORCH_SRC=<extracted tarball>` inside another git
    repository, no network: every step up to the compile runs, in order, and
    none reaches for the network; cmake 3.27+ comes from the requirements
    install (the system one may be older)."""
    env, log = offline_env(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, env=env)  # an enclosing repository
    tree = fake_pytorch_tree(tmp_path / "src" / "pytorch-v2.13.0")
    res = subprocess.run(["make", "patch-build", f"PYTORCH_SRC={tree}", f"PYTHON={env['PYTHON']}"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert network_calls(log) == [], out
    assert "NETWORK" not in out
    assert "no .git: a release tarball" in out and "submodules present" in out
    assert "patch applied" in out
    assert (tree / TREE_HPP).read_text() == HEADER.read_text()
    assert "commtrace::MpiCallScope" in (tree / TREE_CPP).read_text()
    # the wheelhouse's cmake (3.31.6), or a newer one already beside PYTHON
    m = re.search(r"ok\s+cmake\s+(\d+)\.(\d+)", out)
    assert m and (int(m[1]), int(m[2])) >= (3, 27), out
    calls = log.read_text().splitlines()
    assert calls[0].startswith(f"pip install -r {tree}/requirements.txt")
    assert "PIP_NO_INDEX=1" in calls[0] and f"PIP_FIND_LINKS={tmp_path / 'wheelhouse'}" in calls[0]
    assert calls[1].startswith("pip install --no-build-isolation --no-deps -v .")
    assert f"cwd={tree}" in calls[1] and "USE_MPI=1" in calls[1] and re.search(r"MAX_JOBS=\d+", calls[1])
    assert len(calls) == 2
    # the fake compile installed nothing: the check after it fails, clearly
    assert res.returncode != 0 and "the installed torch has no MPI support" in out

    # The patch is detected as applied; revert takes it out of the tree.
    res = build_script("revert", env, PYTORCH_SRC=str(tree))
    assert res.returncode == 0, res.stderr
    assert not (tree / TREE_HPP).exists()


@needs_build_tools
def test_offline_checkout_without_tag_and_missing_pieces(tmp_path):
    env, log = offline_env(tmp_path)
    git = ["git", "-C"]
    # A checkout (e.g. of a release branch) without the tag: version.txt decides, no fetch.
    tree = fake_pytorch_tree(tmp_path / "checkout")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "v2.13.0 sources"]):
        subprocess.run(git + [str(tree)] + args, check=True, env=env, capture_output=True)
    res = build_script("check", env, PYTORCH_SRC=str(tree))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no tag v2.13.0" in res.stdout and "using the checkout as it is" in res.stdout
    assert "patch applies cleanly" in res.stdout

    # Another version, offline: a clear refusal instead of a fetch.
    (tree / "version.txt").write_text("2.12.0\n")
    res = build_script("check", env, PYTORCH_SRC=str(tree), PYTORCH_OFFLINE="1")
    assert res.returncode == 1 and "PYTORCH_OFFLINE=1 and this step needs the network: git fetch" in res.stderr

    # A tarball without its submodules: named, no download attempted.
    bare = fake_pytorch_tree(tmp_path / "tarball", submodule=False)
    res = build_script("prepare", env, PYTORCH_SRC=str(bare))
    assert res.returncode == 1 and "1 submodule(s) missing" in res.stderr and "third_party/pybind11" in res.stderr

    # Something else at PYTORCH_SRC: a clear error, not git clone's "already exists".
    other = tmp_path / "other"
    (other / "x").mkdir(parents=True)
    res = build_script("check", env, PYTORCH_SRC=str(other))
    assert res.returncode == 1 and "is not a PyTorch source tree" in res.stderr

    # A local mirror (PYTORCH_URL) with the tag: cloned without network.
    mirror = fake_pytorch_tree(tmp_path / "mirror")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "m"], ["tag", "v2.13.0"]):
        subprocess.run(git + [str(mirror)] + args, check=True, env=env, capture_output=True)
    dest = tmp_path / "clone" / "pytorch"
    res = build_script("check", env, PYTORCH_SRC=str(dest), PYTORCH_URL=str(mirror), PYTORCH_OFFLINE="1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (dest / TREE_CPP).exists() and "patch applies cleanly" in res.stdout
    # ... but the default URL is the network: refused offline.
    res = build_script("check", env, PYTORCH_SRC=str(tmp_path / "nothing"), PYTORCH_OFFLINE="1")
    assert res.returncode == 1 and "needs the network: git clone https://" in res.stderr

    # Requirements already in the venv (and cmake/ninja on PATH): pip is not run at all.
    ready = fake_pytorch_tree(tmp_path / "ready")
    (ready / "requirements.txt").write_text("numpy\npytest>=1.0 ; python_version >= '3'\n")
    shims = Path(env["PYTHON"]).parent
    (shims / "cmake").write_text('#!/bin/sh\necho "cmake version 3.30.0"\n')
    (shims / "ninja").write_text("#!/bin/sh\necho 1.12.1\n")
    for tool in ("cmake", "ninja"):
        (shims / tool).chmod(0o755)
    res = build_script("prepare", env, PYTORCH_SRC=str(ready), PYTORCH_OFFLINE="1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "build requirements are already installed" in res.stdout and "patch applied" in res.stdout
    assert not log.exists() or not [x for x in log.read_text().splitlines() if x.startswith("pip")]
    assert network_calls(log) == []
