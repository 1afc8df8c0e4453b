"""A backend written in Python, registered with Backend.register_backend, as one rank:
prints (JSON) what the program reads back through the group c10d hands out.
usage: pybackend_worker.py STORE_FILE OUT_JSON"""
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d


class CountingBackend(dist.ProcessGroup):
    """Sums by doubling (one rank), and counts its calls where the program can read them."""

    def __init__(self, rank, size):
        super().__init__(rank, size)
        self.allreduce_calls = 0
        self.last_tag = None

    def getBackendName(self):
        return "counting"

    def tag(self, text):  # the backend's own helper, called by the program
        self.last_tag = text
        return text.upper()

    def allreduce(self, tensors, opts=None):
        self.allreduce_calls += 1
        for t in tensors:
            t.mul_(2)
        fut = torch.futures.Future()
        fut.set_result(tensors)
        return torch._C._distributed_c10d._create_work_from_future(fut)


dist.Backend.register_backend("counting", lambda store, rank, size, timeout: CountingBackend(rank, size))
dist.init_process_group("counting", store=dist.FileStore(sys.argv[1], 1), rank=0, world_size=1)
t = torch.ones(2)
dist.all_reduce(t)
dist.all_reduce(t)
pg = c10d._get_default_group()
res = {
    "result": t.tolist(),
    "allreduce_calls": pg.allreduce_calls,
    "tag": pg.tag("x"),
    "last_tag": pg.last_tag,
    "has_missing": hasattr(pg, "no_such_attribute"),
    "backend": dist.get_backend(),
}
dist.destroy_process_group()
with open(sys.argv[2], "w") as f:
    json.dump(res, f, sort_keys=True)
