"""The mpi backend's Works: one per queued collective or MPI request (``MPIWork``), finished inside
the call (``_DoneWork``), or over a coalesced block (``_MultiWork``). A group's CollectiveQueue
(runtime.py) issues and finishes its queued collectives; the progress thread (runtime.py, started by
runtime.init) completes p2p requests nobody waits on."""
from __future__ import annotations

import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from . import runtime

_state_lock = threading.Lock()    # guards Work._done/_fut hand-over between threads

# C++ callers hold a Python Work by its C++ half. Where torch does not keep the Python half
# alive with it (no PyWorkHolder in PyProcessGroup.hpp: torch 2.4), the Python half dies with
# its last Python reference, and C++'s wait() then runs the base c10d::Work::wait, which never
# returns (getFuture() raises). A finished work's last reference may be the progress thread's:
# c10d's broadcast_coalesced holds two works (DDP's buffer broadcast: float and int64), and
# when the thread finished both before the first wait(), that wait hung. So a finished work is
# kept here until its result is taken: wait() or get_future(), the calls C++ makes on it.
_unclaimed: dict = {}         # id(work) -> work, oldest first
_UNCLAIMED_MAX = 4096         # works a program drops unwaited are kept until this many pile up


def keep(work) -> None:
    """Hold the finished ``work`` until wait() or get_future() claims it."""
    kept = _unclaimed
    kept[id(work)] = work
    if len(kept) > _UNCLAIMED_MAX:   # drop the oldest half (list(): one step under the GIL)
        for k in list(kept)[:_UNCLAIMED_MAX // 2]:
            kept.pop(k, None)


class MPIWork(dist.Work):
    """Work for one queued collective (``call``: the blocking MPI call and its arguments,
    made and finished by the group's CollectiveQueue worker), one MPI request (``req``:
    one thread tests/waits it, the progress thread while it is in its active list, or
    the one that stole it in wait()), or neither: finished."""

    # Defaults for finished works (see _DoneWork, which sets only _result).
    _claimed = False   # get_future(), or wait() before it finished: _finish() need not keep() it
    _done = True
    _exc = None
    _fut = None
    _src = -1
    _req = None
    _event = None      # its profiler event (profiling.py), ended when it finishes
    # A collective's future completes in its communicator's issue order (CollectiveQueue.issued:
    # _order is that queue; _retired is False until the queue completes the future, which
    # may be after _done). P2p works and works finished inside the call are not ordered.
    _order = None
    _retired = True
    _fut_taken = None

    def __init__(self, result, req=None, post=None, status=None, src=-1, keep=None, call=None, event=None,
                 order=None):
        super().__init__()
        self._result = result
        self._event = event
        self._keep = keep      # buffers MPI may still read/write: alive until done
        self._req = req
        self._call = call
        self._post = post
        self._status = status
        self._src = src
        if req is not None or call is not None:   # else finished: the class defaults
            self._done = False
            self._gate = threading.Lock()
            self._gate.acquire()
            if order is not None:   # a started collective: the caller holds the communicator's turn
                order.issued(self)
            if req is not None and runtime.progress is not None:
                runtime.progress.submit(self)

    def _issue(self, dequeue):
        """Make the queued MPI call, ``dequeue()`` this work (the next op may go), then
        finish it (a blocking call), or hand its request to the progress thread. Runs
        on the queue's worker thread, which must survive."""
        fn, args = self._call
        self._call = None
        req = None
        try:
            req = fn(*args)
            exc = None
        except Exception as e:  # noqa: BLE001 -- surfaced through wait()
            exc = RuntimeError(f"mpi backend: {fn.__name__} failed: {e}")
        dequeue()
        if req is not None:     # a non-blocking call started: the progress thread completes it
            self._req = req
            runtime.progress.submit(self)
            return
        try:
            self._finish(exc)
        except Exception:  # noqa: BLE001 -- a future's callback raised: torch logs it there
            pass

    # called once, by the owner of the request
    def _finish(self, exc):
        self._set_done(exc)
        self._complete()

    def _set_done(self, exc):
        """The op is over: results in place, ``wait()`` returns. Its future is left to
        ``_complete()`` (a finisher of several works marks all of them done first: a callback
        of one that waits for another must not wait for its own thread)."""
        if exc is None and self._post is not None:
            try:
                self._post()
            except Exception as e:  # noqa: BLE001 -- surfaced through wait()
                exc = e
        if exc is None and self._status is not None:
            self._src = self._status.Get_source()
        self._keep = None
        if exc is not None and not isinstance(exc, RuntimeError):
            exc = RuntimeError(f"mpi backend: {type(exc).__name__}: {exc}")
        self._exc = exc
        if self._event is not None:
            self._event.end()
            self._event = None
        if not self._claimed:
            keep(self)          # before _done: a wait() that sees it done then finds it kept
        with _state_lock:
            self._done = True
            self._fut_taken = self._fut   # taken before it was done: _complete() completes it
        if self._claimed:       # get_future() came meanwhile (it sets the flag, then pops)
            _unclaimed.pop(id(self), None)
        self._gate.release()

    def _complete(self):
        """Complete the future (its callbacks run), after ``_set_done``: a collective's in
        its communicator's order (CollectiveQueue.retire), a p2p op's at once."""
        if self._order is not None:
            self._order.retire()
            return
        fut = self._fut_taken
        if fut is not None:         # else get_future(), seeing it done, completes its own
            self._complete_future(fut)

    def _retire(self):
        """Complete the future, if anyone took it yet (CollectiveQueue.retire: the works before
        this one have theirs complete); a later get_future() completes it at once."""
        with _state_lock:
            self._retired = True
            fut = self._fut
        if fut is not None:
            self._complete_future(fut)

    def _retire_futureless(self) -> bool:
        """Retire it if nobody took its future (then no callback can run): False if someone did."""
        with _state_lock:
            if self._fut is not None:
                return False
            self._retired = True
            return True

    def _complete_future(self, fut):
        if self._exc is not None:
            fut.set_exception(self._exc)
        else:
            fut.set_result(self._result)

    def wait(self, timeout=None):
        if not self._done:
            self._claimed = True
            secs = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout or 0)
            if self._req is not None and (runtime.progress is None or runtime.progress.steal(self)):
                self._wait_owned(secs)
            elif runtime.progress is not None and runtime.progress.is_current():
                self._wait_on_progress_thread(secs)
            elif not self._gate.acquire(timeout=secs if secs else -1):
                raise RuntimeError(f"mpi backend: Work.wait timed out after {secs} s")
            else:
                self._gate.release()
        if _unclaimed:          # done now: _finish() kept it unless the flag was seen first
            _unclaimed.pop(id(self), None)
        if self._exc is not None:
            raise self._exc
        return True

    def _wait_on_progress_thread(self, secs):
        """wait() in a future's callback, which the progress thread runs, for an op still queued:
        the worker hands a request it starts (a large all_reduce) to this very thread, busy here,
        so nobody would test it; take it over once it exists."""
        import time
        deadline = time.monotonic() + secs if secs else None
        while not self._gate.acquire(timeout=0.001):
            if self._req is not None and runtime.progress.steal(self):
                self._wait_owned(max(deadline - time.monotonic(), 1e-3) if deadline else 0)
                return
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"mpi backend: Work.wait timed out after {secs} s")
        self._gate.release()

    def _wait_owned(self, secs):
        import time
        try:
            if not secs:
                self._req.Wait(self._status)
            else:
                deadline = time.monotonic() + secs
                while not self._req.Test(self._status):
                    if time.monotonic() > deadline:
                        if runtime.progress is not None:
                            runtime.progress.submit(self)   # give it back; it may still finish
                        raise RuntimeError(f"mpi backend: Work.wait timed out after {secs} s")
                    time.sleep(50e-6)
        except RuntimeError:
            raise
        except Exception as e:  # noqa: BLE001
            self._finish(e)
            return
        self._finish(None)

    def is_completed(self):
        if self._done or self._req is None:   # a queued collective: done when its worker says so
            return self._done
        if runtime.progress is None or runtime.progress.steal(self):   # test now, not at the next poll
            try:
                flag = self._req.Test(self._status)
            except Exception as e:  # noqa: BLE001
                self._finish(e)
                return True
            if flag:
                self._finish(None)
                return True
            if runtime.progress is not None:
                runtime.progress.submit(self)
        return self._done

    def is_success(self):
        return self._done and self._exc is None

    def exception(self):
        return self._exc

    def get_future(self):
        """The work's one future (every caller -- DDP, the tracer, the user --
        gets the same object, as with c10d's own Work)."""
        self._claimed = True
        _unclaimed.pop(id(self), None)
        if runtime.progress is None and not self._done:
            self.wait()       # nobody else could complete it
        with _state_lock:
            fut = self._fut
            if fut is not None:
                return fut
            fut = self._fut = torch.futures.Future()
            if not (self._done and self._retired):   # whoever finishes or retires it completes it
                return fut
        self._complete_future(fut)
        return fut

    def result(self):
        self.wait()
        return self._result

    def source_rank(self):
        self.wait()
        return self._src

    _source_rank = source_rank

    def synchronize(self):
        return None


class _DoneWork(MPIWork):
    """A Work that finished inside the call (asyncOp=False). No __init__: the
    pybind constructor plus one attribute is the cheapest Work torch accepts."""

    __init__ = dist.Work.__init__


class _MultiWork(dist.Work):
    """end_coalescing(): one Work over the works issued while coalescing."""

    def __init__(self, works):
        super().__init__()
        self._works = works

    def wait(self, timeout=None):
        for w in self._works:
            w.wait(timeout)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def get_future(self):
        if getattr(self, "_fut", None) is not None:
            return self._fut   # one future per work, whoever asks
        fut = self._fut = torch.futures.Future()
        futs = [w.get_future() for w in self._works]
        res = [t for w in self._works for t in w._result]
        if not futs:
            fut.set_result(res)
            return fut
        all_f = torch.futures.collect_all(futs)

        def done(f):
            try:
                f.value()
                for x in f.value():
                    x.value()
                fut.set_result(res)
            except Exception as e:  # noqa: BLE001
                fut.set_exception(e)
        all_f.add_done_callback(done)
        return fut

    def exception(self):
        for w in self._works:
            if w._exc is not None:
                return w._exc
        return None

    def result(self):
        self.wait()
        return [t for w in self._works for t in w._result]

