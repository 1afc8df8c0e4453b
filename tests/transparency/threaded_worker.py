"""torch's multi-threaded test backend ("threaded", what MultiThreadedTestCase runs on): two ranks
as threads of this process, a DeviceMesh over them and a functional all_reduce on it.
Prints (JSON) each rank's result or error. usage: threaded_worker.py"""
import json
import threading

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import DeviceMesh
from torch.testing._internal.distributed.multi_threaded_pg import (
    _install_threaded_pg, _uninstall_threaded_pg, ProcessLocalGroup)

WORLD = 2
results = {}


def rank_main(rank, store):
    try:
        dist.init_process_group("threaded", rank=rank, world_size=WORLD, store=store)
        mesh = DeviceMesh("cpu", torch.arange(WORLD))
        results[rank] = funcol.all_reduce(torch.full((2,), float(rank + 1)), "sum", mesh).tolist()
        dist.destroy_process_group()
    except Exception as e:  # the program's own report of what failed
        results[rank] = f"{type(e).__name__}: {e}"
        ProcessLocalGroup.exception_handle(e)  # wakes the other rank out of its collective


torch._C._distributed_c10d._set_thread_isolation_mode(True)  # as MultiThreadedTestCase
_install_threaded_pg()
store = dist.HashStore()
threads = [threading.Thread(target=rank_main, args=(r, store)) for r in range(WORLD)]
for t in threads:
    t.start()
for t in threads:
    t.join()
_uninstall_threaded_pg()
print(json.dumps({str(r): results[r] for r in range(WORLD)}, sort_keys=True))
