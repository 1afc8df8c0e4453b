"""Wait until a rank's trace holds what a fault script needs on disk before it injects its fault
(no fixed sleep: one too short on a loaded machine, too long on an idle one).

Read as ``commtrace check`` reads them (``trace.reader.read_process``: a record being written,
a line half-written, is left out): the files of ``rank`` of this process's world (its world line,
in its own files, tells a later world's rank 0 from an earlier one's), the default group's ops.
"""
import glob
import os
import sys
import time

from commtrace.trace import reader, schema

DEADLINE_S = 40   # under the tests' 60 s for the whole run: this says why, not the test's timeout
POLL_S = 0.1


def _trace(run_dir: str, stem: str, world_id):
    """The trace of files ``stem`` (a glob) of world ``world_id`` (any: None), read now, or None."""
    for meta in glob.glob(os.path.join(glob.escape(run_dir), stem + schema.META_SUFFIX)):
        pt = reader.read_process(meta, [])
        if pt is not None and pt.world_id is not None and world_id in (None, pt.world_id):
            return pt
    return None


def _status(pt) -> dict:
    """seq -> status of the default group's last record per op."""
    default = {gid for gid, g in pt.groups.items() if g.get("desc") == "default_pg"}
    rec = pt.records
    return {int(s): int(st) for s, st, g in zip(rec["seq"], rec["status"], rec["group"]) if int(g) in default}


def until(found, what: str) -> None:
    """Poll ``found()`` (a true value: done) until the deadline; then say ``what`` was awaited, exit 99."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if found():
            return
        time.sleep(POLL_S)
    sys.stderr.write(f"on_disk: no {what} on disk after {DEADLINE_S} s\n")
    os._exit(99)


def _mine():
    """This process's own trace, read now (None before its first flush)."""
    return _trace(os.environ[schema.ENV_DIR], f"*.pid{os.getpid()}", None)


def wait_for(rank: int, completed: int, in_flight: int | None = None) -> None:
    """Return once the trace of ``rank`` (of this process's world) has the default group's seqs
    1..``completed`` completed and, if given, seq ``in_flight`` written in flight (an op blocked
    for more than 1 s is, by the next flush)."""
    want = {s: schema.STATUS_COMPLETED for s in range(1, completed + 1)}
    if in_flight is not None:
        want[in_flight] = schema.STATUS_IN_FLIGHT

    def found():
        me = _mine()
        pt = me and _trace(os.environ[schema.ENV_DIR], f"rank{rank}.pid*", me.world_id)
        seen = pt and _status(pt)
        return seen and all(seen.get(s) == st for s, st in want.items())
    until(found, f"rank {rank} records {want} (seq: status)")


def wait_for_dump(reason: str, rank: int) -> None:
    """Return once this process's state dump for ``reason`` ("SIGUSR1") is on disk: its file, by the
    name ``watchdog.dump`` gives it, looked up without a generator on this thread's stack (the signal
    thread reads the stack while this thread runs on: a generator frame left meanwhile ends it)."""
    path = os.path.join(os.environ[schema.ENV_DIR], f"{reason.lower()}.rank{rank}.pid{os.getpid()}.json")
    until(lambda: os.path.exists(path), f"{reason} dump of this process")
