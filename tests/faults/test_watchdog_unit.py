"""The hang watchdog and dumps in-process, on a real Recorder with a fake in-flight op."""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time

import pytest
import torch
import torch.distributed as dist

from commtrace import torch_compat

import helpers as h
from commtrace.capture import native_wrapper, watchdog
from commtrace.capture.recorder import Recorder
from commtrace.capture.wrapper import TracedProcessGroup
from commtrace.trace.reader import load_run


def _recorder(tmp_path):
    rec = Recorder(str(tmp_path), "run", "none", ["test"])
    rec.add_world({"world_id": "w", "rank": 0, "world_size": 1, "backend": "gloo"})
    rec.add_group({"name": "0", "desc": "default_pg", "world_id": "w", "size": 1, "ranks": [0], "rank": 0,
                   "backend": "gloo"})
    sig = rec.add_sig("k", {"op": "all_reduce", "variant": "allreduce", "shapes": [[4, 4]], "dtype": "float32",
                            "bytes": 64, "callsite": "train.py:7 (step)"})
    return rec, sig


class _NotDone:
    def is_completed(self):
        return False

    def wait(self):
        return True

    def get_future(self):
        raise RuntimeError("no future")


def _row(sig, age_s, seq=1):
    return [time.monotonic_ns() - int(age_s * 1e9), 0, 0, seq, sig, 0, 0, 2, 0]


def test_dump_once_per_episode(tmp_path, capsys):
    rec, sig = _recorder(tmp_path)
    wd = watchdog.HangWatchdog(rec, 0.5, abort=False)
    try:
        assert not wd.tick()  # nothing in flight
        row = _row(sig, 2.0, seq=7)
        rec.tracker.active[id(row)] = row
        assert wd.tick() and not wd.tick()  # one dump per episode
        del rec.tracker.active[id(row)]
        assert not wd.tick()  # episode over
        row2 = _row(sig, 1.0, seq=8)
        rec.tracker.track(row2, _NotDone(), sig, True)  # async op not finished
        assert wd.tick()
        assert wd.dumps == 2
    finally:
        rec.close()
    names = sorted(n for n in os.listdir(tmp_path) if n.startswith("hang."))
    assert names == [f"hang.rank0.pid{os.getpid()}.2.json", f"hang.rank0.pid{os.getpid()}.json"]
    doc = json.load(open(tmp_path / f"hang.rank0.pid{os.getpid()}.json"))
    op = doc["in_flight"][0]
    assert (op["op"], op["group"], op["seq"], op["shapes"], op["state"]) == ("all_reduce", "0", 7, [[4, 4]],
                                                                          "in_backend_call")
    assert op["age_s"] >= 2.0 and op["callsite"] == "train.py:7 (step)"
    assert any(t["name"] == "MainThread" and any(f["function"] == "test_dump_once_per_episode" for f in t["frames"])
               for t in doc["threads"])
    assert "pickle" not in open(tmp_path / names[0]).read()[:0]  # JSON only
    err = capsys.readouterr().err
    assert "all_reduce (group 0 seq 7) in flight" in err and "dumped to" in err
    run = load_run(str(tmp_path))
    dumps = run.processes[0]["dumps"]
    assert [d["reason"] for d in dumps] == ["hang", "hang"] and dumps[0]["path"] == names[1]


def test_dump_after_close_still_writes_file(tmp_path):
    rec, sig = _recorder(tmp_path)
    rec.close()
    path = watchdog.dump(rec, "SIGUSR1", quiet=True)
    assert path and os.path.isfile(path)


def test_hang_timeout_env(monkeypatch):
    monkeypatch.setenv(watchdog.ENV_HANG_TIMEOUT, "2.5")
    assert watchdog.hang_timeout_from_env() == 2.5
    monkeypatch.setenv(watchdog.ENV_HANG_TIMEOUT, "junk")
    assert watchdog.hang_timeout_from_env() is None
    monkeypatch.delenv(watchdog.ENV_HANG_TIMEOUT)
    assert watchdog.hang_timeout_from_env() is None


class _BlockingBackend(dist.ProcessGroup):
    """A real one-rank backend written in Python whose all_reduce blocks inside
    the call until released (as a Python MPI backend does in a stuck Allreduce)."""

    def __init__(self, error: str | None = None):
        super().__init__(0, 1)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.error = error  # raised once, when released

    def getBackendName(self):
        return "blocking"

    def getGroupName(self):
        return "0"

    def getGroupDesc(self):
        return "default_pg"

    def allreduce(self, tensors, opts=None):
        self.entered.set()
        self.release.wait(30)
        if self.error:
            text, self.error = self.error, None
            raise RuntimeError(text)
        fut = torch.futures.Future()
        fut.set_result(tensors)
        return torch._C._distributed_c10d._create_work_from_future(fut)


class _CallbackBehind(_BlockingBackend):
    """Its all_reduce returns at once; the op's future completes when the test says, and a
    callback of its own, ahead of the wrapper's, holds the later ones back: as a busy
    backend thread does (a future wakes its waiters before it runs its callbacks)."""

    def __init__(self):
        super().__init__()
        self.future = torch.futures.Future()
        self.future.add_done_callback(lambda _: self.release.wait(30))

    def allreduce(self, tensors, opts=None):
        return torch._C._distributed_c10d._create_work_from_future(self.future)


def _wrap(kind, inner, rec):
    if kind == "python":
        return TracedProcessGroup(inner, rec, 0, [0])
    h.ensure_native_wrapper()
    traced = native_wrapper.make_traced(inner, rec, 0, [0], "native")  # allreduce: bridged by torch's trampoline
    assert type(traced).__name__ == "TracedPG"
    return traced


@pytest.mark.parametrize("kind", ["python", "native"])
def test_op_blocked_inside_backend_call_is_described(tmp_path, kind):
    """An op that never returns from the backend is described (op, shapes,
    callsite, thread) by the watchdog and by the flush thread's in-flight record.
    (The Python wrapper looks its sig up after issuing it; the native one before.)"""
    rec, _ = _recorder(tmp_path)
    inner = _BlockingBackend()
    traced = _wrap(kind, inner, rec)
    t = torch.ones(3, 2)
    opts = torch_compat.make_options(dist.AllreduceOptions, async_op=False)
    th = threading.Thread(target=lambda: traced.allreduce([t], opts), name="trainer")
    th.start()
    try:
        assert inner.entered.wait(10)
        (op,) = watchdog.in_flight_ops(rec)
        assert (op["op"], op["variant"], op["shapes"], op["dtype"], op["seq"], op["state"], op["thread"]) == (
            "all_reduce", "allreduce", [[3, 2]], "float32", 1, "in_backend_call", "trainer")
        assert op["callsite"].startswith(os.path.join("tests", "faults", "test_watchdog_unit.py:"))
        rec.flush(final=True)   # the flush thread's in-flight record of the blocked op
        df = load_run(str(tmp_path)).frame
        assert list(zip(df["op"], df["status"], df["callsite"])) == [("all_reduce", "in_flight", op["callsite"])]
    finally:
        inner.release.set()
        th.join(10)
        rec.close()
    df = load_run(str(tmp_path)).frame  # the owner's record replaces the snapshot, under the same sig
    assert list(zip(df["op"], df["status"], df["callsite"], df["seq"])) == [
        ("all_reduce", "completed", op["callsite"], 1)]


def _seq_status_by_file(run_dir) -> dict:
    """{trace file: [(seq, status), ...]} of a run directory."""
    df = load_run(str(run_dir)).frame
    return {f: list(zip(g["seq"], g["status"].astype(str))) for f, g in df.groupby(df["file"].astype(str))}


@pytest.mark.parametrize("kind", ["python", "native"])
@pytest.mark.parametrize("fails", [False, True], ids=["ends", "fails"])
def test_op_running_across_a_restart_stays_in_its_session(tmp_path, kind, fails):
    """stop() and start() again (Recorder.close, reopen) while an op is inside the backend call:
    the first session's files have it IN_FLIGHT, and neither its end nor its error reaches the second's."""
    rec, _ = _recorder(tmp_path)
    inner = _BlockingBackend("peer gone" if fails else None)
    traced = _wrap(kind, inner, rec)
    opts = torch_compat.make_options(dist.AllreduceOptions, async_op=False)

    def step():
        with contextlib.suppress(RuntimeError):
            traced.allreduce([torch.ones(2)], opts)
    th = threading.Thread(target=step)
    th.start()
    try:
        assert inner.entered.wait(10)
        rec.close(how="stop")
        rec.reopen(str(tmp_path), "run", "none", ["test"])
        inner.release.set()
        th.join(10)
        step()  # the second session's own op
    finally:
        inner.release.set()
        th.join(10)
        rec.close()
    rows = _seq_status_by_file(tmp_path)
    stem = f"rank0.pid{os.getpid()}"
    assert rows == {stem: [(1, "in_flight")], stem + ".s2": [(2, "completed")]}
    with open(tmp_path / f"{stem}.s2.meta.jsonl") as f:
        assert [m for m in map(json.loads, f) if m["type"] == "error"] == []


@pytest.mark.parametrize("kind", ["python", "native"])
def test_op_ended_before_its_callback_ran_is_written_completed_at_stop(tmp_path, kind):
    """DDP waits on an all_reduce's future, goes on, and stop() comes before the backend thread
    ran the wrapper's callback on it: the stopped session's files have the op completed."""
    rec, _ = _recorder(tmp_path)
    inner = _CallbackBehind()
    traced = _wrap(kind, inner, rec)
    traced.allreduce([torch.ones(2)], torch_compat.make_options(dist.AllreduceOptions, async_op=True))
    backend_thread = threading.Thread(target=inner.future.set_result, args=([torch.ones(2)],))
    backend_thread.start()
    try:
        inner.future.wait()
        rec.close(how="stop")
        rec.reopen(str(tmp_path), "run", "none", ["test"])
    finally:
        inner.release.set()
        backend_thread.join(10)
        rec.close()
    rows = _seq_status_by_file(tmp_path)
    assert rows == {f"rank0.pid{os.getpid()}": [(1, "completed")]}
