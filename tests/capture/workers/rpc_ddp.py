"""DDP inside RPC trainers (pytorch/examples distributed/rpc/ddp_rpc's pattern): the
backward pass is ``torch.distributed.autograd.backward`` in a distributed autograd
context, not ``loss.backward()``. 2 forked ranks, gloo + TensorPipe RPC. With ``distopt``,
each step ends with ``DistributedOptimizer(SGD).step(context_id)`` over the DDP module's parameters
(RRefs owned by the trainer itself; SGD has a TorchScript functional optimizer).

``rpc_ddp.py PORT RPC_PORT STEPS [distopt]``
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def main(rank, port, rpc_port, steps, distopt):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{rpc_port}")
    rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
    if distopt:
        from torch.distributed.optim import DistributedOptimizer
        opt = DistributedOptimizer(torch.optim.SGD, [rpc.RRef(p) for p in model.parameters()], lr=0.05)
        assert opt.is_functional_optim       # TorchScript: no torch.optim step runs anywhere
    for i in range(steps):
        with dist_autograd.context() as cid:
            loss = model(torch.full((2, 8), float(rank + i))).sum()
            dist_autograd.backward(cid, [loss])
            if distopt:
                opt.step(cid)
    rpc.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(main, args=(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] == ["distopt"]),
                       nprocs=2, start_method="fork")
