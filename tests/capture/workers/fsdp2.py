"""FSDP2 (fully_shard over a 1-D DeviceMesh) on gloo/CPU, 2 forked ranks.

``fsdp2.py PORT OUT STEPS [DEVICE]``: a Linear layer and a residual block sharded
separately, then the root; SGD for STEPS steps; rank 0 writes a hash of the full
parameters to OUT. DEVICE ``cuda``: both ranks on GPU 0, gloo on CUDA tensors
(tests/gpu; NCCL refuses two ranks on one GPU, and FSDP2 sends nothing at world size 1).
FSDP2 issues its all_gather / reduce_scatter from C++ (the *_single trampoline names).
The block ends in a Dropout(0.0), which returns its input as is (LLM configs with
dropout 0, pytorch/examples' FSDP2 transformer).
"""
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class Residual(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x):
        return x + self.drop(self.lin(x))


def main(rank, port, out, steps, device):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from torch.distributed.device_mesh import init_device_mesh
    from commtrace import torch_compat
    fully_shard = torch_compat.fully_shard()
    mesh = init_device_mesh(device, (2,))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), Residual(32)).to(device)
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        loss = model(torch.randn(8, 16, generator=g).to(device)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.full_tensor().detach().cpu().numpy().tobytes())
    if rank == 0:
        with open(out, "w") as f:
            f.write(h.hexdigest())
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.05)  # see Recorder.EXIT_SETTLE_S: gloo may still drop a Work at exit


if __name__ == "__main__":
    device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    # forked on CPU: tests/capture/workers/ranks_entry.py says why (tests/gpu's CUDA ranks spawned, as before)
    mp.start_processes(main, args=(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), device), nprocs=2,
                       start_method="fork" if device == "cpu" else "spawn")
