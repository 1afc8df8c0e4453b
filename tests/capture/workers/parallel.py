"""FSDP2 / FSDP1 / tensor parallel / 2-D training on gloo/CPU, forked ranks.

``parallel.py SCENARIO WORLD PORT OUT STEPS``; SCENARIO is one of
fsdp2, fsdp2-keep (reshard_after_forward=False), fsdp2-prefetch (explicit
forward/backward prefetch), fsdp1 (FullyShardedDataParallel, one unit per block
and the root, ``device_id`` CPU; its default backward prefetch), tp
(Colwise/Rowwise pairs and a SequenceParallel norm; then one distribute_tensor of its own), 2d (FSDP2 over "dp" x TP
over "tp", each block parallelized by a call of its own, as torchtitan does). Every step clips the gradients' norm between backward and the
optimizer step (FSDP1's own clip_grad_norm_; else torch.nn.utils', per DeviceMesh).
The tp scenario lets ``init_device_mesh`` make the world (no backend named: torch's
default for the device), as pytorch/examples' tensor-parallel scripts do.

Each step's forward and backward run under its own ``CommDebugMode`` (its module
tracker does not survive a second forward), its clipping, ``opt.step()`` and
``opt.zero_grad()`` under another: rank r writes ``OUT.r.json`` with, per step, the
first's ``comm_module_counts`` (module -> forward/backward -> op -> count, a module's
count including its submodules') and ``comm_counts`` and the second's ``comm_counts``
(``optimizer``), plus a hash of the parameters so a traced run can be compared with
an untraced one.
"""
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d=8, n=2):
        super().__init__()
        self.layers = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _tp_plan(sequence_parallel: bool) -> dict:
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel
    plan = {}
    for i in range(2):
        if sequence_parallel:
            plan[f"layers.{i}.norm"] = SequenceParallel()
            plan[f"layers.{i}.up"] = ColwiseParallel(input_layouts=Shard(1))
            plan[f"layers.{i}.down"] = RowwiseParallel(output_layouts=Shard(1))
        else:
            plan[f"layers.{i}.up"] = ColwiseParallel()
            plan[f"layers.{i}.down"] = RowwiseParallel()
    return plan


def _parallelize_block(block, mesh):
    """Where only the block is in reach (its model is in the caller's frame)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


def build(scenario, rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    torch.manual_seed(0)
    model = Net()
    if scenario == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        return FullyShardedDataParallel(model, device_id=torch.device("cpu"), auto_wrap_policy=ModuleWrapPolicy({Block}))
    if scenario.startswith("fsdp2"):
        from commtrace import torch_compat
        fully_shard = torch_compat.fully_shard()
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        keep = scenario == "fsdp2-keep"
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=not keep)
        fully_shard(model, mesh=mesh, reshard_after_forward=not keep)
        if scenario == "fsdp2-prefetch":
            a, b = model.layers
            a.set_modules_to_forward_prefetch([b])
            b.set_modules_to_backward_prefetch([a])
    elif scenario == "tp":
        from torch.distributed.tensor.parallel import parallelize_module
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        parallelize_module(model, mesh, _tp_plan(sequence_parallel=True))
        from torch.distributed.tensor import Shard, distribute_tensor
        distribute_tensor(torch.arange(2.0 * world), mesh, [Shard(0)])  # DIRECT: the program's own DTensor
    elif scenario == "2d":
        from commtrace import torch_compat
        fully_shard = torch_compat.fully_shard()
        from torch.distributed.tensor.parallel import parallelize_module
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
        for layer in model.layers:  # one block at a time, as torchtitan does
            _parallelize_block(layer, mesh["tp"])
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    return model


def clip(model, scenario):
    """Clip the gradient norm to 1 (one call per DeviceMesh: torch's clip_grad_norm_ takes DTensors of one mesh)."""
    if scenario == "fsdp1":
        model.clip_grad_norm_(1.0)
        return
    by_mesh: dict = {}
    for p in model.parameters():
        by_mesh.setdefault(getattr(p, "device_mesh", None), []).append(p)
    for params in by_mesh.values():
        torch.nn.utils.clip_grad_norm_(params, 1.0)


def _plain(counts):
    return {mod: {phase: {str(op): n for op, n in ops.items()} for phase, ops in v.items()}
            for mod, v in counts.items()}


def _root_reshards_after_forward(model):
    """Whether FSDP2 frees the root's parameters after forward (None: no FSDP2 root).
    torch 2.7 never does, whatever reshard_after_forward says (backward would gather
    them again at once); later releases only where the caller left it unset."""
    state = getattr(model, "_get_fsdp_state", None)
    group = state()._fsdp_param_group if state else None
    return None if group is None else group.post_forward_mesh_info is not None


def main(rank, scenario, world, port, out, steps):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if scenario == "tp":
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.tensor.debug import CommDebugMode
    model = build(scenario, rank, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)  # the same batch on every rank (TP needs it)
    per_step = []
    for _ in range(steps):
        x = torch.randn(4, 6, 8, generator=g)
        mode = CommDebugMode()
        with mode:
            loss = model(x).square().mean()
            loss.backward()
        with CommDebugMode() as after:  # the optimizer phase: clipping, step, zero_grad
            clip(model, scenario)
            opt.step()
            opt.zero_grad()
        per_step.append({"modules": _plain(mode.comm_module_counts),
                         "total": {str(k): v for k, v in mode.comm_counts.items()},
                         "optimizer": {str(k): v for k, v in after.comm_counts.items() if v}})
    h = hashlib.sha256()
    for p in model.parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        h.update(t.detach().numpy().tobytes())
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump({"steps": per_step, "hash": h.hexdigest(), "root": type(model).__name__,
                   "root_reshards": _root_reshards_after_forward(model)}, f)
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.05)  # see Recorder.EXIT_SETTLE_S


if __name__ == "__main__":
    scenario, world = sys.argv[1], int(sys.argv[2])
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(main, args=(scenario, world, int(sys.argv[3]), sys.argv[4], int(sys.argv[5])), nprocs=world,
                       start_method="fork")
