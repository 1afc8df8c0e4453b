"""2-rank gloo DDP under comm hooks and training-loop variants, one after another
(test fixture for tests/report/test_ddp_variants.py, which counts by hand what
each variant must send).

usage: ddp_variants.py PORT [VARIANT,...]   (default: all, in order)

Each variant runs inside ``commtrace.region(<name>)`` with a model of its own.
Net: Linear(8, 16) -> ReLU -> Linear(16, 4), bucket_cap_mb of 300 bytes: two
gradient buckets, [fc2.bias, fc2.weight, fc1.bias] (4 + 64 + 16 floats = 336 B)
and [fc1.weight] (128 floats = 512 B).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as powersgd
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_local
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.distributed.optim import PostLocalSGDOptimizer, ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

import commtrace

CAP_MB = 300 / 2**20


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Branches(torch.nn.Module):
    """Two heads, one used per forward: find_unused_parameters with a changing graph."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 4)
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x, use_a):
        return self.a(x) if use_a else self.b(x)


def train(model, opt, steps, micro=1, forward=None):
    forward = forward or (lambda m, x, i: m(x))
    for i in range(steps):
        opt.zero_grad()
        for k in range(micro):
            x = torch.randn(4, 8)
            if k < micro - 1:
                with model.no_sync():
                    forward(model, x, i).sum().backward()
            else:
                forward(model, x, i).sum().backward()
        opt.step()


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)


def hooked(hook, state, steps, cap_mb=CAP_MB):
    model = DDP(Net(), bucket_cap_mb=cap_mb)
    model.register_comm_hook(state, hook)
    # DDP logs the hook by its name; a traced hook must keep it
    assert model._get_ddp_logging_data().get("comm_hook") == hook.__qualname__
    train(model, sgd(model), steps)


def allreduce_hook():
    hooked(default_hooks.allreduce_hook, None, 3)


def fp16():
    hooked(default_hooks.fp16_compress_hook, None, 2)


# PowerSGD with one bucket (the default cap): with several, its callbacks issue
# all_reduces from gloo's thread while the main thread issues the next bucket's,
# in an order that differs between ranks -- that hangs untraced too (torch 2.13).
# (batched_powerSGD_hook cannot run in torch 2.13: it passes a 2-D matrix to
# _orthogonalize, which asserts 3-D, untraced as well.)
def powersgd_hook():
    hooked(powersgd.powerSGD_hook,
           powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2), 4, 25)


def post_localsgd():
    subgroup, _ = dist.new_subgroups(group_size=1)
    model = DDP(Net(), bucket_cap_mb=CAP_MB)
    model.register_comm_hook(post_local.PostLocalSGDState(process_group=None, subgroup=subgroup,
                                                          start_localSGD_iter=2), post_local.post_localSGD_hook)
    opt = PostLocalSGDOptimizer(optim=sgd(model), averager=PeriodicModelAverager(period=2, warmup_steps=2))
    train(model, opt, 5)


def accumulation():
    model = DDP(Net(), bucket_cap_mb=CAP_MB)
    train(model, sgd(model), 2, micro=3)


def two_models():
    first, second = DDP(Net(), bucket_cap_mb=CAP_MB), DDP(torch.nn.Linear(8, 4), bucket_cap_mb=CAP_MB)
    opt = torch.optim.SGD(list(first.parameters()) + list(second.parameters()), lr=0.01)
    train(first, opt, 2, forward=lambda m, x, i: m(x).sum() + second(x).sum())


def static_graph():
    model = DDP(Net(), bucket_cap_mb=CAP_MB, static_graph=True)
    train(model, sgd(model), 5)


def find_unused():
    model = DDP(Branches(), bucket_cap_mb=150 / 2**20, find_unused_parameters=True)
    train(model, sgd(model), 3, forward=lambda m, x, i: m(x, i % 2 == 0))


def zero():
    model = DDP(Net(), bucket_cap_mb=CAP_MB)
    train(model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.01), 3)


def many_buckets():
    """Six Linear(16, 16) (1088 B each) under a 1100-byte cap, gradients as bucket views,
    static graph: four buckets after the rebuild. Rank 0 prints DDP's own bucket sizes."""
    model = DDP(torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(6)]), bucket_cap_mb=1100 / 2**20,
                gradient_as_bucket_view=True, static_graph=True)
    train(model, sgd(model), 4, forward=lambda m, x, i: m(torch.cat([x, x], dim=1)))  # 16 features
    if dist.get_rank() == 0:
        print("many_buckets rebuilt_bucket_sizes", model._get_ddp_logging_data().get("rebuilt_bucket_sizes"))


def device_mesh():
    """DDP given ``device_mesh=``: building a DeviceMesh turns on module tracking, in which a
    DDP module is a module like any other. Last: tracking stays on for later variants."""
    from torch.distributed.device_mesh import init_device_mesh
    model = DDP(Net(), device_mesh=init_device_mesh("cpu", (2,), mesh_dim_names=("dp",)), bucket_cap_mb=CAP_MB)
    train(model, sgd(model), 3)


# region name -> variant, in the order they run
VARIANTS = {"allreduce_hook": allreduce_hook, "fp16": fp16, "powersgd": powersgd_hook,
            "post_localsgd": post_localsgd, "accumulation": accumulation, "two_models": two_models,
            "static_graph": static_graph, "find_unused": find_unused, "zero": zero,
            "many_buckets": many_buckets, "device_mesh": device_mesh}


def worker(rank, world, port, names):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    for name in names:
        with commtrace.region(name):
            VARIANTS[name]()
    dist.destroy_process_group()


if __name__ == "__main__":
    chosen = sys.argv[2].split(",") if len(sys.argv) > 2 else list(VARIANTS)
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(worker, args=(2, int(sys.argv[1]), chosen), nprocs=2, start_method="fork")
