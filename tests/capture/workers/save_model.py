"""A whole model saved with torch.save and deep-copied once the module tracker is on.

``save_model.py PORT OUT``: one gloo rank builds a DeviceMesh (which turns commtrace's
module tracker on when traced; a Probe module's all_reduce then names it), trains a
small model (one layer with a forward hook of its own, as TP's and FSDP's have) one step, then writes
``OUT.pt`` (torch.save of the whole model), ``OUT.pkl`` (pickle of a deep copy) and
``OUT.json`` (the model's output on a fixed input, the forward hooks the copy carries, and
those of a layer whose own hook was removed).
"""
import copy
import json
import os
import pickle
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def own_hook(module, args, output):  # the loader defines one of this name too
    return None


class Probe(nn.Module):
    def forward(self, x):
        dist.all_reduce(x)
        return x


def main(port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh
    init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    Probe()(torch.ones(1))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 2)))
    model[2].register_forward_hook(own_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    torch.save(model, f"{out}.pt")
    twin = copy.deepcopy(model)
    # counted before its first forward: a live copy gets the tracker's hook then
    twin_hooks = sum(len(m._forward_hooks) for m in twin.modules())
    with open(f"{out}.pkl", "wb") as f:
        pickle.dump(twin, f)
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    # a hook the program removes (as CommDebugMode removes the per-module hooks it added when
    # it exits): after the next forward the module carries the hooks the program left, none
    layer = nn.Linear(4, 4)
    handle = layer.register_forward_hook(own_hook)
    layer(x)
    handle.remove()
    layer(x)
    with open(f"{out}.json", "w") as f:
        json.dump({"y": model(x).tolist(), "y_twin": twin(x).tolist(),
                   "twin_hooks": twin_hooks, "released_hooks": len(layer._forward_hooks)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
