"""Blocking send/recv on a backend written in Python whose Work only implements wait()
(no future, never is_completed()): messages travel through the c10d store.

``pybackend_p2p.py WORLD PORT OUT`` starts WORLD ranks; each writes OUT.rank<R> with what it received.
"""
import json
import time

import torch
import torch.distributed as dist


class StoreWork(dist._Work):
    """Done when wait() returns: the recv reads its message from the store there."""

    def __init__(self, finish=None):
        super().__init__()
        self.finish = finish

    def wait(self, timeout=None):
        if self.finish is not None:
            self.finish()
            self.finish = None
        return True


class StoreP2P(dist.ProcessGroup):
    """send/recv/barrier over the store (a key per (src, dst, n-th message))."""

    def __init__(self, store, rank, size):
        super().__init__(rank, size)
        self.store, self.sent, self.got, self.barriers = store, {}, {}, 0

    def getBackendName(self):
        return "storep2p"

    def send(self, tensors, dst, tag=0):
        n = self.sent[dst] = self.sent.get(dst, 0) + 1
        self.store.set(f"p2p/{self.rank()}/{dst}/{n}", json.dumps(tensors[0].tolist()))
        return StoreWork()

    def recv(self, tensors, src, tag=0):
        n = self.got[src] = self.got.get(src, 0) + 1

        def finish():
            tensors[0].copy_(torch.tensor(json.loads(self.store.get(f"p2p/{src}/{self.rank()}/{n}"))))
        return StoreWork(finish)

    def barrier(self, opts=None):
        self.barriers += 1
        key = f"barrier/{self.barriers}"
        self.store.add(key, 1)
        return StoreWork(lambda: _wait_count(self.store, key, self.size()))


def _wait_count(store, key, n):
    while int(store.add(key, 0)) < n:
        time.sleep(0.01)


def main(rank, world, out):
    dist.Backend.register_backend("storep2p", lambda store, r, size, timeout: StoreP2P(store, r, size),
                                  devices=["cpu"])
    dist.init_process_group("storep2p", init_method="env://", rank=rank, world_size=world)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    buf = torch.zeros(3)
    for step in range(2):
        if rank == 0:
            dist.send(torch.full((3,), float(10 * step + rank)), nxt)
            dist.recv(buf, prv)
        else:
            dist.recv(buf, prv)
            dist.send(torch.full((3,), float(10 * step + rank)), nxt)
    dist.barrier()
    store = dist.distributed_c10d._get_default_store()
    store.add("exited", 1)
    if rank == 0:  # rank 0 holds the store's server: the last to leave
        _wait_count(store, "exited", world)
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"got": buf.tolist()}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
