"""The hang watchdog and dumps in-process, on a real Recorder with a fake in-flight op."""
from __future__ import annotations

import json
import os
import time

from commtrace.capture import watchdog
from commtrace.capture.recorder import Recorder
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
        rec.active[id(row)] = row
        assert wd.tick() and not wd.tick()  # one dump per episode
        del rec.active[id(row)]
        assert not wd.tick()  # episode over
        row2 = _row(sig, 1.0, seq=8)
        rec.track(row2, _NotDone(), sig, True)  # async op not finished
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
