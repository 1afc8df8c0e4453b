"""A p2p Work that reports is_completed() before its wait() raises, on a backend written in Python
(no future, as PyTorch's test backends): rank 1's irecv says it completed, the trace writes it so,
and then the caller's wait() raises (the peer is gone).

``p2p_done_then_raise.py WORLD PORT OUT`` spawns 2 ranks; rank 1 writes OUT.rank1 with what its wait
raised and the status the trace had for the recv before the wait.
"""
import glob
import json
import os
import time

import torch
import torch.distributed as dist

MESSAGE = "peer gone: connection closed by rank 0"


class EndedWork(dist._Work):
    """Reports completion at once; wait() raises what the transfer ended with."""

    def is_completed(self):
        return True

    def wait(self, timeout=None):
        raise RuntimeError(MESSAGE)


class DeadPeer(dist.ProcessGroup):
    def getBackendName(self):
        return "deadpeer"

    def recv(self, tensors, src, tag=0):
        return EndedWork()


def recv_status_on_disk(run_dir: str, deadline: float):
    """The status this rank's trace has written for its recv, once written (None at the deadline)."""
    import commtrace
    while time.monotonic() < deadline:
        if glob.glob(os.path.join(run_dir, "rank1.*.ops.bin")):
            df = commtrace.load(run_dir)
            rows = df[(df["rank"] == 1) & (df["op"] == "recv")]
            if len(rows):
                return str(rows["status"].iloc[0])
        time.sleep(0.05)
    return None


def main(rank, world, out):
    dist.Backend.register_backend("deadpeer", lambda store, r, size, timeout: DeadPeer(r, size), devices=["cpu"])
    dist.init_process_group("deadpeer", init_method="env://", rank=rank, world_size=world)
    if rank == 1:
        work = dist.irecv(torch.zeros(4), src=0)
        before = recv_status_on_disk(os.environ["COMMTRACE_DIR"], time.monotonic() + 60)
        try:
            work.wait()
            raised = None
        except RuntimeError as e:
            raised = str(e)
        with open(f"{out}.rank{rank}", "w") as fh:
            json.dump({"raised": raised, "status_before_wait": before}, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main)
