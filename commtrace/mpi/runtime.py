"""The process's MPI, shared by every mpi group: mpi4py's module, the progress
thread and the SUM reduction of each common dtype. Initialized once, by the
first group (``init()``); read by the groups' ops (collectives.py) and their Works
(work.py). Also each group's ``CollectiveQueue``: the order its collectives reach MPI.

The progress thread completes the requests of point-to-point ops and large all_reduces (MPI moves
data only while some thread is inside it, and a program may wait on ``work.get_future()`` alone). It
polls (MPI_Testsome, then a short sleep) rather than blocking in MPI_Waitsome: Open MPI's wait spins
a core, mpirun binds a rank to one core, and a blocked Waitsome cannot take new requests.
``Work.wait()`` steals its request and MPI_Waits on it itself (done on arrival, not at the next
poll); ``Progress.lock`` decides ownership: this thread (while in ``active``) or one stealer.
"""
from __future__ import annotations

import atexit
import collections
import os
import threading
import time

import torch
import torch.distributed as dist

from .. import mpienv
from . import dtypes

MPI = None
IN_PLACE = None
progress = None   # the progress thread; None where MPI may not be called from a second thread
SUM_OPS: dict = {}  # dtype -> (MPI.Op, avg) for SUM, the common case


def init():
    """mpi4py.MPI, after setting up the rest of this module the first time."""
    global MPI, progress, IN_PLACE
    if MPI is None:
        MPI = mpienv.mpi_module()
        IN_PLACE = MPI.IN_PLACE
        progress = Progress(MPI)
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            # MPI was initialized elsewhere at a lower level: no second thread may call MPI.
            # Collectives then run blocking; p2p requests are completed by whoever waits on them.
            progress = None
        for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                   torch.int64):
            SUM_OPS[dt] = dtypes.reduce_op(dist.ReduceOp.SUM, dt)
    return MPI


# Seconds between polls while requests are outstanding (env override for tuning).
# Linux's timer slack makes any such sleep last >= ~50 us, so this mostly sets
# how much longer: DDP (bucket_cap_mb=1, 2 ranks) ran 1.32x gloo's step time
# with 50 us on a 16-core machine and 1.00x with 5 us; 0.74x -> 0.62x on 2 cores
# (measured when DDP's all_reduces were non-blocking requests polled here).
POLL_INTERVAL = float(os.environ.get("COMMTRACE_MPI_POLL_US", "5")) * 1e-6


class Progress:
    def __init__(self, MPI, interval: float = POLL_INTERVAL):
        self._MPI = MPI
        self.interval = interval
        self.lock = threading.Condition(threading.Lock())
        self.active: list = []        # works whose request this thread tests
        self.to_retire: list = []     # CollectiveQueues whose worker finished a work (retire_later)
        self._stop = False
        self._thread = None

    def submit(self, work) -> None:
        with self.lock:
            was_idle = not self.active
            self.active.append(work)
            if self._thread is None:
                self._start()
            elif was_idle:
                self.lock.notify()

    def retire_later(self, queue) -> bool:
        """Run ``queue.retire()`` on this thread soon; False once the thread is stopped."""
        with self.lock:
            if self._stop:
                return False
            self.to_retire.append(queue)
            if self._thread is None:
                self._start()
            else:
                self.lock.notify()
        return True

    def is_current(self) -> bool:
        """Whether the caller is this thread (a future's callback runs here)."""
        return self._thread is threading.current_thread()

    def steal(self, work) -> bool:
        """Take ``work`` away from the thread; False if it already completed
        (or is being completed) there."""
        with self.lock:
            try:
                self.active.remove(work)
            except ValueError:
                return False
            return True

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="commtrace-mpi-progress",
                                        daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        with self.lock:
            self._stop = True
            self.lock.notify()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)

    def _run(self) -> None:
        testsome = self._MPI.Request.Testsome
        lock = self.lock
        while True:
            done = ()
            failed = ()
            with lock:
                while not self.active and not self.to_retire and not self._stop:
                    lock.wait()
                if self._stop:
                    return
                queues, self.to_retire = self.to_retire, []
                active = self.active
                statuses = []   # one per finished request, in idx's order
                try:
                    idx = testsome([w._req for w in active], statuses) if active else None
                except Exception:
                    idx = None
                    failed = self._find_failed(active)
                if idx:
                    done = [active[i] for i in idx]
                    for w, status in zip(done, statuses):
                        active.remove(w)
                        if w._status is not None:   # recv_anysource: its sender is only in here
                            w._status = status
            # All of them done before any future's callbacks run: one may wait for another.
            for w, exc in failed:
                w._set_done(exc)
            for w in done:
                w._set_done(None)
            for w, _ in failed:
                w._complete()
            for w in done:
                w._complete()
            for q in queues:
                q.retire()
            if not done and not failed and not queues:
                time.sleep(self.interval)

    @staticmethod
    def _find_failed(active):
        # Testsome raised: test each request to learn which one failed.
        out = []
        for w in list(active):
            try:
                flag = w._req.Test(w._status)
            except Exception as exc:  # noqa: BLE001 -- surfaced through the Work
                active.remove(w)
                out.append((w, exc))
                continue
            if flag:
                active.remove(w)
                out.append((w, None))
        return out


class CollectiveQueue:
    """One communicator's collectives, issued one at a time in call order, each as the same
    kind of MPI call on every rank (docs/mpi-backend.md, "Order of collectives"): an async op
    is queued and run by this queue's worker thread; a blocking op runs inline on the
    caller's thread when nothing is queued or running (``claim``), else is queued and waited for.

    ``turn`` is held by whoever is issuing a collective on the communicator: an inline
    caller, or the worker while ``queued`` is not empty. A queued work leaves ``queued``
    only once its MPI call returned, so a caller that finds ``queued`` empty and takes
    ``turn`` overtakes nothing it (or any thread it synchronized with) queued before.

    The collectives' futures complete in the same order (``issued``, ``retire``): MPI may
    finish a later non-blocking collective before an earlier one, and a future's callbacks
    (DDP comm hooks, ZeRO's step) then ran in a different order on each rank.
    """

    def __init__(self):
        self.turn = threading.Lock()
        self.queued = collections.deque()   # works not yet issued or being issued, oldest first
        self._wake = threading.Condition(threading.Lock())
        self._thread = None
        self._closed = False
        # Works issued (in their turn) whose futures are not completed yet, oldest first; only
        # the thread that set _retiring (under _retiring_lock) pops them.
        self.unretired = collections.deque()
        self._retiring_lock = threading.Lock()
        self._retiring = False

    def claim(self) -> bool:
        """Take the turn for a blocking call on the caller's thread (release ``turn``
        after it); False: ops are queued or being issued, ``put`` this one behind them."""
        return not self.queued and self.turn.acquire(False)

    def put(self, work) -> None:
        """Queue ``work`` (its ``_issue()`` makes the blocking call and finishes it)."""
        with self._wake:
            self.queued.append(work)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="commtrace-mpi-collectives",
                                                daemon=True)
                self._thread.start()
                atexit.register(self.close)
            self._wake.notify()

    def close(self) -> None:
        """The group is shut down (or the process exits): the worker ends once nothing is
        queued (a later ``put`` starts another), and is waited for. A daemon thread still
        running at interpreter finalization dies as it next takes the GIL: inside a tensor's
        deallocation (a finished op's buffers, dropped as it returns) that aborts the process."""
        with self._wake:
            self._closed = True
            self._wake.notify()
            worker = self._thread
        atexit.unregister(self.close)
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=5)

    def issued(self, work) -> None:
        """Note ``work`` (an MPIWork) as issued; the caller holds ``turn``, so this is the
        order its MPI call started in. Its future completes after those issued before it."""
        work._order = self
        work._retired = False
        self.unretired.append(work)

    def retire(self) -> None:
        """Complete the futures of the done works at the head of ``unretired``, oldest first,
        on this thread (their callbacks run here), until one is not done yet: whoever
        finishes that one calls this again. Called by a work's finisher after it set ``_done``.
        One thread retires at a time; a caller that finds another at it leaves its work to
        it: that thread's test of the head and its giving up happen under the same lock,
        after the caller's ``_done`` is set, so it either sees the work done or has given up
        before the caller looks. The worker retires only works whose future nobody took and
        hands the rest to the progress thread: a callback that waits for a queued op (ZeRO's
        last bucket waits for its broadcasts) would otherwise wait for the worker itself."""
        on_worker = self.on_worker()
        lock = self._retiring_lock
        head = self.unretired
        with lock:
            if self._retiring:
                return
            self._retiring = True
        while True:
            with lock:
                if not head or not head[0]._done:
                    self._retiring = False
                    return
            work = head[0]      # only the retiring thread pops: it stays the head
            if on_worker and not work._retire_futureless():
                with lock:
                    self._retiring = False
                if progress is not None and progress.retire_later(self):
                    return
                on_worker = False   # no progress thread left (exit): run them here
                with lock:
                    if self._retiring:
                        return
                    self._retiring = True
                continue
            head.popleft()
            if not on_worker:
                try:
                    work._retire()
                except Exception:  # noqa: BLE001 -- torch logs a callback's error; the rest must go on
                    pass

    def on_worker(self) -> bool:
        """Whether the caller is this queue's worker. A future callback runs there only once the
        progress thread has stopped (``retire``, at exit): a blocking op it makes is issued
        inline, in its turn; queueing it would wait on itself."""
        return self._thread is threading.current_thread()

    def _run(self) -> None:
        queued = self.queued
        while True:
            with self._wake:
                while not queued:
                    if self._closed:
                        self._thread = None
                        return
                    self._wake.wait()
            with self.turn:
                while queued:
                    work = queued[0]
                    self.issued(work)
                    work._issue(queued.popleft)
