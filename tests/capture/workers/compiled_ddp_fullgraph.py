"""DDP compiled whole (``torch.compile(ddp_model, fullgraph=True)``, Dynamo's
``optimize_ddp="python_reducer"``, as torch's test_replicate_with_compiler does on CPU), 2
forked gloo ranks.

``compiled_ddp_fullgraph.py PORT OUT``: rank 0 writes a hash of the outputs and parameters to
OUT. fullgraph=True admits no graph break: one in a commtrace wrapper DDP.forward calls
(``_pre_forward``) fails the program.
"""
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def main(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch._dynamo.config.optimize_ddp = "python_reducer"
    torch.manual_seed(0)
    m = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)))
    cm = torch.compile(m, fullgraph=True)
    g = torch.Generator().manual_seed(rank)
    h = hashlib.sha256()
    for _ in range(2):
        y = cm(torch.randn(4, 8, generator=g))
        h.update(y.detach().numpy().tobytes())
    for p in m.parameters():
        h.update(p.detach().numpy().tobytes())
    if rank == 0:
        with open(out, "w") as fh:
            fh.write(h.hexdigest())
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.05)  # see Recorder.EXIT_SETTLE_S: gloo may still drop a Work at exit


if __name__ == "__main__":
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(main, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2, start_method="fork")
