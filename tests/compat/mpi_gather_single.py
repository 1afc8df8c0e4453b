"""torch 2.15's gather_single / gather_into_tensor on the mpi backend (test fixture of
test_smoke.py), under mpirun with 2 ranks: to rank 1 (whose rank 0 passes no output), async,
and to rank 0. ``--install``: untraced, the backend installed by hand (commtrace.mpi.install()).

usage: mpi_gather_single.py [--install]    prints one JSON line per rank: each gathered tensor
"""
import json
import os
import sys

import torch
import torch.distributed as dist

if "--install" in sys.argv:
    import commtrace.mpi
    commtrace.mpi.install()
dist.init_process_group("mpi")
rank = dist.get_rank()
x = torch.full((2,), float(rank + 1))
to_one = torch.zeros(4) if rank == 1 else None
dist.gather_single(x, to_one, dst=1)
out = {"rank": rank, "to_one": to_one.tolist() if to_one is not None else None}
dist.gather_into_tensor(x * 10, to_one, dst=1, async_op=True).wait()
out["async"] = to_one.tolist() if to_one is not None else None
to_zero = torch.zeros(2, 2) if rank == 0 else None
dist.gather_into_tensor(x * 100, to_zero, dst=0)
out["to_zero"] = to_zero.tolist() if to_zero is not None else None
os.write(1, (json.dumps(out) + "\n").encode())   # one write: the ranks' lines never interleave
dist.destroy_process_group()
