"""Where map tasks run: in this process, in a local process pool, or on a Dask cluster.

All three map a function over tasks and yield results as they finish (the folds do not depend on
order). The pool and Dask keep at most ``ahead`` (default ``2 x workers``) tasks in flight, so the
results waiting to be folded stay bounded, and submit the first ones when ``map`` is called, so the
caller can work while they run (serial: each task runs when its result is asked for). Dask is an
existing distributed engine (``distributed.Client``): no scheduler or RPC of our own."""
from __future__ import annotations

import os
from contextlib import contextmanager
from itertools import islice
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from ...errors import CommtraceError
from .heap import keep_freed_memory

ENV_DASK = "COMMTRACE_DASK"


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@contextmanager
def _died_as_error():
    try:
        yield
    except BrokenProcessPool:
        # A worker died without a Python exception: killed by the OS (out of memory, most often) or by a signal.
        raise CommtraceError("a worker process of the analysis died without an error (killed by the system: "
                             "out of memory?); a lower --memory-limit runs fewer and smaller tasks at once") from None


class SerialExecutor:
    name = "serial"
    workers = 1

    def map(self, fn, tasks, ahead: int | None = None):
        """``fn`` of each task, in order, run when its result is asked for (``ahead``: unused)."""
        keep_freed_memory()       # the tasks run in this process
        return (fn(t) for t in tasks)

    def close(self):
        pass


class PoolExecutor:
    """``concurrent.futures.ProcessPoolExecutor`` over this machine's cores."""
    name = "processes"

    def __init__(self, workers: int):
        # The platform's default start method (fork on Linux): "spawn" and "forkserver" re-import
        # the caller's __main__, which breaks scripts without a __main__ guard. Workers only run
        # the map functions (no output), so the progress bar's thread cannot hold a lock they need.
        self.workers = max(1, workers)
        keep_freed_memory()       # this process receives and folds the results (measured: 0.38-0.41 s of CPU, not 0.41-0.52)
        self.pool = ProcessPoolExecutor(max_workers=self.workers, initializer=keep_freed_memory)

    def map(self, fn, tasks, ahead: int | None = None):
        """``fn`` of each task, results as they complete: ``ahead`` tasks submitted now (the module
        doc), the others as results are taken."""
        ahead = max(1, ahead or 2 * self.workers)
        it = iter(tasks)
        with _died_as_error():
            pending = {self.pool.submit(fn, t) for t in islice(it, ahead)}
        return self._results(fn, it, pending)

    def _results(self, fn, it, pending: set):
        with _died_as_error():
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for t in islice(it, len(done)):
                    pending.add(self.pool.submit(fn, t))
                for f in done:
                    yield f.result()

    def close(self):
        self.pool.shutdown(cancel_futures=True)


class DaskExecutor:
    """The same tasks on a Dask distributed cluster (``SCHEDULER`` address, or a Client)."""
    name = "dask"

    def __init__(self, scheduler):
        try:
            from distributed import Client
        except ImportError:
            raise CommtraceError("--dask needs the 'distributed' package (pip install 'commtrace[scale]')") from None
        self.own = not hasattr(scheduler, "submit")
        try:
            # how long to try: Dask's own setting (distributed.comm.timeouts.connect, 30 s unless set)
            self.client = Client(scheduler) if self.own else scheduler
        except (OSError, TimeoutError) as e:
            raise CommtraceError(f"--dask {scheduler}: cannot reach the scheduler ({e})") from None
        self.workers = max(1, sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values()))

    def map(self, fn, tasks, ahead: int | None = None):
        """As PoolExecutor.map, on the cluster."""
        it = iter(tasks)
        first = [self.client.submit(fn, t, pure=False) for t in islice(it, max(1, ahead or 2 * self.workers))]
        return self._results(fn, it, first)

    def _results(self, fn, it, first: list):
        from distributed import as_completed
        done = as_completed(first)
        for f in done:
            try:
                res = f.result()
            except CommtraceError:
                raise
            except Exception as e:   # e.g. a worker without commtrace, or without the run directory
                raise CommtraceError(f"--dask: a task failed on the cluster: {type(e).__name__}: {e} (the workers "
                                     "need commtrace installed and the run directory on a filesystem they share)"
                                     ) from None
            f.release()
            nxt = next(it, None)
            if nxt is not None:
                done.add(self.client.submit(fn, nxt, pure=False))
            yield res

    def close(self):
        if self.own:
            self.client.close()


def uses_dask(dask) -> bool:
    """Whether the tasks go to a Dask cluster (``dask`` or $COMMTRACE_DASK)."""
    return bool(dask or os.environ.get(ENV_DASK))


def sized_executor(dask, workers: int | None, serial: bool, tasks: int, fit: int):
    """make_executor; unless ``workers`` is given or Dask runs the tasks: this process for a
    ``serial`` run, else a worker per task up to the cores and the ``fit`` tasks the memory holds."""
    if workers is None and not uses_dask(dask):
        workers = 1 if serial else max(1, min(cpu_count(), tasks or 1, fit))
    return make_executor(dask, workers)


def make_executor(dask=None, workers: int | None = None):
    """Dask when ``dask`` (an address or a Client) or $COMMTRACE_DASK is given, else a
    process pool of ``workers`` (1: serial, in this process)."""
    dask = dask or os.environ.get(ENV_DASK) or None
    if dask:
        return DaskExecutor(dask)
    workers = cpu_count() if workers is None else workers
    return SerialExecutor() if workers <= 1 else PoolExecutor(workers)
