"""The recorder's completion policy and flushing, driven directly (no process group).

The work objects here are tiny stand-ins for c10d Work handles: the recorder
only calls is_completed(), wait() and get_future() on them."""
import time

import numpy as np

from commtrace.capture import completion as C
from commtrace.capture import recorder as R
from commtrace.trace import schema


class FakeFuture:
    def __init__(self, work):
        self.callbacks, self.work = [], work

    def add_done_callback(self, cb):
        self.callbacks.append(cb)

    def finish(self):
        self.work.done = True
        for cb in self.callbacks:
            cb(self)

    def done(self):
        return self.work.done

    def value(self):
        if self.work.error:
            raise self.work.error
        return []


class FakeWork:
    def __init__(self, done=False, error=None):
        self.done, self.error, self.fut, self.waited = done, error, FakeFuture(self), 0

    def is_completed(self):
        return self.done

    def wait(self):
        self.waited += 1
        if self.error:
            raise self.error
        return True

    def get_future(self):
        return self.fut


def _rec(tmp_path):
    rec = R.Recorder(str(tmp_path), "run", "none", ["x"])
    rec.sink.stop.set()  # drive flushes by hand
    rec.add_world({"world_id": "w", "rank": 0, "world_size": 1, "backend": "gloo"})
    rec.add_group({"world": 0, "name": "0", "size": 1, "rank": 0, "ranks": [0]})
    small = rec.add_sig(("small",), {"op": "all_reduce", "bytes": 4, "out_bytes": 4, "device": "cpu", "cpu": True})
    big = rec.add_sig(("big",), {"op": "all_reduce", "bytes": 1 << 20, "out_bytes": 1 << 20, "device": "cuda", "cpu": False})
    bigcpu = rec.add_sig(("bigcpu",), {"op": "all_reduce", "bytes": 1 << 20, "device": "cpu", "cpu": True})
    return rec, small, big, bigcpu


def _records(tmp_path):
    return np.fromfile(tmp_path / "rank0.pid{}.ops.bin".format(__import__("os").getpid()), dtype=schema.OP_RECORD)


def _row(sig, t=None):
    return [t or time.monotonic_ns(), 0, 0, 1, sig, 0, 0, schema.STATUS_IN_FLIGHT, 0]


def test_big_cpu_op_gets_callback_small_op_is_polled(tmp_path):
    rec, small, _, bigcpu = _rec(tmp_path)
    w_big, w_small = FakeWork(), FakeWork()
    r_big, r_small = _row(bigcpu), _row(small)
    rec.tracker.track(r_big, w_big, bigcpu, True)
    rec.tracker.track(r_small, w_small, small, True)
    assert len(w_big.fut.callbacks) == 1 and not w_small.fut.callbacks
    assert r_small[C.FLAGS] & schema.FLAG_END_OBSERVED and not r_big[C.FLAGS] & schema.FLAG_END_OBSERVED
    w_big.fut.finish()
    assert r_big[C.T_END] > 0
    rec.tracker.observe_completions()
    assert r_small[C.T_END] == 0  # not completed yet: still unobserved
    w_small.done = True
    rec.tracker.observe_completions()
    assert r_small[C.T_END] > 0 and not rec.tracker.unobserved


def test_device_ops_are_polled_never_waited(tmp_path):
    rec, _, big, _ = _rec(tmp_path)
    w = FakeWork(done=True)
    row = _row(big)
    rec.tracker.track(row, w, big, False)
    assert not w.fut.callbacks  # no future callback for device work
    rec.flush()
    assert w.waited == 0  # the recorder never waits on work it does not own
    recs = _records(tmp_path)
    assert len(recs) == 1 and recs["flags"][0] & schema.FLAG_END_OBSERVED
    assert recs["status"][0] == schema.STATUS_COMPLETED


def test_failed_cpu_work_recorded_failed_without_waiting(tmp_path):
    rec, small, _, _ = _rec(tmp_path)
    w = FakeWork(done=True, error=RuntimeError("peer died"))
    rec.tracker.track(_row(small), w, small, True)
    rec.flush()
    assert _records(tmp_path)["status"][0] == schema.STATUS_FAILED
    assert w.waited == 0  # a second wait() on gloo send/recv work blocks: never call it


def test_long_running_op_written_in_flight_once_then_final(tmp_path):
    rec, small, _, _ = _rec(tmp_path)
    w = FakeWork()
    row = _row(small, t=time.monotonic_ns() - 2 * C.IN_FLIGHT_AFTER_NS)
    rec.tracker.track(row, w, small, True)
    rec.flush()
    rec.flush()
    recs = _records(tmp_path)
    assert list(recs["status"]) == [schema.STATUS_IN_FLIGHT]
    w.done = True
    rec.flush()
    recs = _records(tmp_path)
    assert list(recs["status"]) == [schema.STATUS_IN_FLIGHT, schema.STATUS_COMPLETED]


def test_close_writes_unfinished_ops_and_end_line(tmp_path):
    rec, small, _, _ = _rec(tmp_path)
    rec.tracker.track(_row(small), FakeWork(), small, True)
    rec.exit_info = (3, "exit")
    rec.close()
    recs = _records(tmp_path)
    assert list(recs["status"]) == [schema.STATUS_IN_FLIGHT]
    meta = (tmp_path / f"rank0.pid{__import__('os').getpid()}.meta.jsonl").read_text().splitlines()
    assert '"exit_code":3' in meta[-1] and '"type":"end"' in meta[-1]


class FakeCudaEndTimer:
    """Stand-in for capture.cuda_end.CudaEndTimer: events are ints; ``ends``
    maps an event to its host end time once it has completed."""

    def __init__(self):
        self.ends, self.issued = {}, []

    def end_event(self, work, index):
        self.issued.append((work, index))
        return len(self.issued)

    def end_ns(self, ev, index):
        return self.ends.get(ev)


def _cuda_sig(rec):
    return rec.add_sig(("cuda0",), {"op": "all_reduce", "bytes": 1 << 20, "device": "cuda", "cpu": False,
                                    "cuda_index": 0})


def test_cuda_op_end_time_comes_from_its_event(tmp_path):
    rec, _, _, _ = _rec(tmp_path)
    sig = _cuda_sig(rec)
    assert "cuda_index" not in rec.sig_lines[sig]  # capture-side only, never written
    rec.tracker.cuda_timer = timer = FakeCudaEndTimer()
    w = FakeWork(done=True)  # NCCL: complete at enqueue, yet the kernel still runs
    row = _row(sig)
    rec.tracker.track(row, w, sig, False)
    assert timer.issued == [(w, 0)] and not row[C.FLAGS] & schema.FLAG_END_OBSERVED
    rec.flush()
    assert row[C.T_END] == 0 and len(_records(tmp_path)) == 0  # event not done: is_completed() is not enough
    timer.ends[1] = row[C.T_CALL] + 12_345
    rec.flush()
    recs = _records(tmp_path)
    assert len(recs) == 1 and recs["status"][0] == schema.STATUS_COMPLETED
    assert recs["d_end"][0] == 12_345 and not recs["flags"][0] & schema.FLAG_END_OBSERVED
    assert w.waited == 0 and not rec.tracker.device_ends


def test_cuda_event_never_done_falls_back_to_polling_at_close(tmp_path):
    rec, _, _, _ = _rec(tmp_path)
    sig = _cuda_sig(rec)
    rec.tracker.cuda_timer = timer = FakeCudaEndTimer()
    early = _row(sig)
    rec.tracker.track(early, FakeWork(done=True), sig, False)
    timer.ends[1] = early[C.T_CALL] - 500  # an anchor error can put it before the call: clamped
    late = _row(sig)
    rec.tracker.track(late, FakeWork(done=True), sig, False)
    rec.close()
    recs = _records(tmp_path)
    assert list(recs["status"]) == [schema.STATUS_COMPLETED] * 2
    assert recs["d_end"][0] == 0 and not recs["flags"][0] & schema.FLAG_END_OBSERVED
    assert recs["flags"][1] & schema.FLAG_END_OBSERVED  # observed by polling, flagged as such


def test_cuda_op_without_event_is_polled(tmp_path):
    rec, _, _, _ = _rec(tmp_path)
    sig = _cuda_sig(rec)

    class NoEvents(FakeCudaEndTimer):  # e.g. gloo on CUDA: future not done at return
        def end_event(self, work, index):
            return None
    rec.tracker.cuda_timer = NoEvents()
    row = _row(sig)
    rec.tracker.track(row, FakeWork(done=True), sig, False)
    assert row[C.FLAGS] & schema.FLAG_END_OBSERVED and not rec.tracker.device_ends


def test_thread_context_is_the_calling_threads_own(tmp_path):
    """A comm hook's bucket scope (push_thread_context) holds on its thread only,
    nests, and leaves the process-wide context alone; ids stay unique per key."""
    import threading

    rec = R.Recorder(str(tmp_path), "run", "none", ["x"])
    rec.sink.stop.set()
    rec.set_context(phase="backward", module="Net")
    outer = rec.push_thread_context({**rec.context_fields(), "bucket": 0})
    seen = {}

    def other():  # another thread (gloo's, running a callback) sees the process's context
        seen["key"] = rec.current_context_key()
        token = rec.push_thread_context({"phase": "backward", "module": "Net", "bucket": 1})
        seen["own"] = rec.current_context_key()
        rec.pop_thread_context(token)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["key"] == (("module", "Net"), ("phase", "backward"))
    assert seen["own"] == (("bucket", 1), ("module", "Net"), ("phase", "backward"))
    assert rec.current_context_key() == (("bucket", 0), ("module", "Net"), ("phase", "backward"))
    inner = rec.push_thread_context({"bucket": 2})
    assert rec.thread_context_fields() == {"bucket": 2}
    rec.pop_thread_context(inner)
    assert rec.thread_context_fields() == {"phase": "backward", "module": "Net", "bucket": 0}
    ident = threading.get_ident()
    assert rec.thread_context_ids[ident] == rec._context_ids[rec.current_context_key()]
    assert rec.context_key == (("module", "Net"), ("phase", "backward"))  # the process's own, untouched
    rec.pop_thread_context(outer)
    assert rec.thread_context_fields() is None and not rec.thread_context_ids and not rec.thread_context_keys
    assert rec.current_context_key() == rec.context_key
    assert len(set(rec._context_ids.values())) == len(rec._context_ids)


def test_sink_names_its_files_and_a_forked_childs_sink_starts_afresh(tmp_path, monkeypatch):
    """The start file becomes the rank's (renamed, .s<N> for a restarted session); a
    forked child's sink keeps the session and bounded options but has no files yet, and starts now."""
    import os

    from commtrace.capture.trace_sink import TraceSink

    monkeypatch.setenv(schema.ENV_KEEP_LAST, "5")
    sink = TraceSink(str(tmp_path), "run", "none", ["x"], 2)
    assert sink.bounded.keep_last == 5 and sink.header(None)["bounded"] == {"keep_last": 5, "steps": None}
    sink.open_start_file([])
    assert os.path.basename(sink.writer.meta_path).startswith("proc.") and sink.writer.stem.endswith(f".pid{os.getpid()}.s2")
    assert sink.open_rank_files(3, []) is True                      # renamed, not a new file
    assert sink.writer.stem == f"rank3.pid{os.getpid()}.s2" and sink.header(3)["rank"] == 3
    monkeypatch.delenv(schema.ENV_KEEP_LAST)
    child = sink.child()
    assert child.writer is None and child.call_order is None and child.stop is not sink.stop
    assert (child.session, child.bounded) == (2, sink.bounded)
    assert child.t_mono0 > sink.t_mono0 and child.t_wall0 >= sink.t_wall0     # its own start: the fork's
    assert child.open_rank_files(3, []) is False                    # a fresh file set
    assert TraceSink(str(tmp_path), "run", "none", ["x"], 3).bounded is None   # a new session reads the environment
    sink.writer.close()
    child.writer.close()
