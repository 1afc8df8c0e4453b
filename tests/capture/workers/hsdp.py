"""FSDP1 HYBRID_SHARD on a 2x2 DeviceMesh ("replicate", "shard"), use_orig_params, 4 gloo
ranks: a root (Net: head) and two Block units, 3 AdamW steps, each counted by torch's
CommDebugMode. Rank r writes OUT.r.json: {"losses": [...], "counts": [{op: n}, ...]}.

usage: hsdp.py PORT OUT
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.tensor.debug import CommDebugMode


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)      # 72 floats: 36 per rank of a shard group

    def forward(self, x):
        return torch.relu(self.fc(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block() for _ in range(2))
        self.head = torch.nn.Linear(8, 2)    # 18 floats: the root unit, 9 per rank

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def main(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(0)
    model = FSDP(Net(), device_mesh=mesh, sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                 auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True, device_id=torch.device("cpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, counts = [], []
    for step in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank * 10 + step))
        with CommDebugMode() as mode:
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
        counts.append({str(k).split(".")[-1]: v for k, v in mode.get_comm_counts().items()})
        losses.append(loss.item())
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump({"losses": losses, "counts": counts}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(main, args=(4, int(sys.argv[1]), sys.argv[2]), nprocs=4, start_method="fork")
