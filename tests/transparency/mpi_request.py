"""Under `mpirun ... commtrace run`: an explicit request for backend "mpi" works
on torch built without MPI, while every probe still says MPI is not available.
Prints one JSON line per rank."""
import json
import sys

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


def probes():
    return [dist.is_mpi_available(), dist.is_backend_available("mpi"), hasattr(c10d, "ProcessGroupMPI"),
            "mpi4py" in sys.modules]


before = probes()
dist.init_process_group("mpi")
world = torch.ones(2)
dist.all_reduce(world)
sub = dist.new_group(backend="mpi")
t = torch.full((3,), float(dist.get_rank() + 1))
dist.all_reduce(t, group=sub)
print(json.dumps({"rank": dist.get_rank(), "backend": dist.get_backend(), "sub_backend": dist.get_backend(sub),
                  "before": before, "after": probes(), "world": world.tolist(), "sub": t.tolist()}), flush=True)
dist.destroy_process_group()
