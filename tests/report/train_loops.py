"""2-rank gloo DDP training loops as users write them, one after another (test fixture
for tests/report/test_train_loops.py, which counts by hand what each must send).

usage: train_loops.py PORT [LOOP,...]   (default: all, in order)

Each loop runs inside ``commtrace.region(<name>)`` and prints its losses (rank 0),
so a traced run can be compared with an untraced one.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

import commtrace


class BNNet(torch.nn.Module):
    """Linear(8, 16) -> BatchNorm1d(16) -> ReLU -> Linear(16, 4): 212 + 32 floats of
    parameters (976 B, one bucket), buffers running_mean/var (16 floats each) and
    num_batches_tracked (int64)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class Generator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 8)      # 40 floats = 160 B

    def forward(self, z):
        return torch.tanh(self.fc(z))


class Discriminator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 1)      # 9 floats = 36 B

    def forward(self, x):
        return self.fc(x)


class Checkpointed(torch.nn.Module):
    """Two Linear(8, 8) blocks under activation checkpointing: 144 floats = 576 B."""

    def __init__(self, reentrant):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))
        self.reentrant = reentrant

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        return x


class AllReduceGrad(torch.autograd.Function):
    """Identity forward, a blocking all_reduce of the gradient in backward (as SyncBatchNorm's
    backward and a model-parallel region's input gradient do), and an async one of its norm
    (a float32 scalar, waited for right after: a program's statistic, as a loss-side hook's)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        norm = grad.norm().reshape(1)
        dist.all_reduce(norm, async_op=True).wait()
        return grad


class RegionNet(torch.nn.Module):
    """Linear(8, 16) -> ReLU -> AllReduceGrad -> Linear(16, 4): 212 floats (848 B); under a
    300-byte cap DDP rebuilds two buckets, [fc2.bias, fc2.weight, fc1.bias] (336 B) and
    [fc1.weight] (512 B). The region's gradient is 4 x 16 floats (256 B)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(AllReduceGrad.apply(torch.relu(self.fc1(x))))


def say(*args):
    if dist.get_rank() == 0:
        print(*args, flush=True)


def validation():
    """6 training steps with an LR scheduler; after steps 2, 4 and 6 a validation pass
    (model.eval(), no_grad then inference_mode, an uneven number of batches per rank),
    its metrics reduced (all_reduce, a padded all_gather of uneven predictions,
    all_gather_object), then an early-stopping flag broadcast from rank 0: it stops
    after the second validation (step 4)."""
    rank = dist.get_rank()
    model = DDP(BNNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    best, bad = float("inf"), 0
    for step in range(1, 7):
        model.train()
        opt.zero_grad()
        loss = model(torch.randn(8, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        sched.step()
        say("validation step", step, round(loss.item(), 6))
        if step % 2:
            continue
        model.eval()
        total, preds = torch.zeros(2), []
        with torch.no_grad():
            for _ in range(2 + rank):                        # rank 0: 2 batches, rank 1: 3
                out = model(torch.randn(4, 8))
                total += torch.tensor([out.pow(2).sum().item(), out.numel()])
                preds.append(out.argmax(1))
        with torch.inference_mode():
            model(torch.randn(2, 8))
        dist.all_reduce(total)                                # 8 B
        mine = torch.cat(preds)                               # 8 or 12 int64
        size = torch.tensor([mine.numel()])
        sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
        dist.all_gather(sizes, size)                          # 8 B
        padded = torch.zeros(int(max(sizes)), dtype=mine.dtype)
        padded[:mine.numel()] = mine
        gathered = [torch.zeros_like(padded) for _ in sizes]
        dist.all_gather(gathered, padded)                     # 12 int64 = 96 B
        names = [None] * dist.get_world_size()
        dist.all_gather_object(names, {"rank": rank, "n": mine.numel()})
        val = (total[0] / total[1]).item()
        say("validation val", step, round(val, 6), sum(int(s) for s in sizes))
        bad = 0 if val < best else bad + 1
        best = min(best, val)
        stop = torch.tensor([int(step >= 4)])                # rank 0 decides
        dist.broadcast(stop, 0)                               # 8 B
        if stop.item():
            break


def gan():
    """3 iterations: a D step (real and fake in one D forward), then a G step."""
    gen, disc = DDP(Generator()), DDP(Discriminator())
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    for it in range(3):
        real, z = torch.randn(4, 8), torch.randn(4, 4)
        fake = gen(z)
        opt_d.zero_grad()
        scores = disc(torch.cat([real, fake.detach()]))
        loss_d = torch.nn.functional.softplus(-scores[:4]).mean() + torch.nn.functional.softplus(scores[4:]).mean()
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        loss_g = torch.nn.functional.softplus(-disc(fake)).mean()
        loss_g.backward()
        opt_g.step()
        say("gan", it, round(loss_d.item(), 6), round(loss_g.item(), 6))


def checkpointed(reentrant):
    model = DDP(Checkpointed(reentrant), static_graph=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for it in range(4):
        opt.zero_grad()
        loss = model(torch.randn(4, 8, requires_grad=reentrant)).pow(2).mean()
        loss.backward()
        opt.step()
        say("checkpoint", reentrant, it, round(loss.item(), 6))


def amp():
    """bfloat16 autocast with a GradScaler whose scale overflows on the first step
    (init_scale 2**127, a loss of ~100): GradScaler skips that optimizer.step() and
    backs its scale off by 2**-10, so the later gradients are finite."""
    model = DDP(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127, backoff_factor=2.0**-10)
    for it in range(4):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(4, 8)).float().pow(2).mean() * 100
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        say("amp", it, round(loss.item(), 6), scaler.get_scale())


def backward_collective():
    model = DDP(RegionNet(), bucket_cap_mb=300 / 2**20)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for it in range(3):
        opt.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        say("backward_collective", it, round(loss.item(), 6))


LOOPS = {"validation": validation, "gan": gan, "checkpoint_reentrant": lambda: checkpointed(True),
         "checkpoint": lambda: checkpointed(False), "amp": amp, "backward_collective": backward_collective}


def worker(rank, world, port, names):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    for name in names:
        with commtrace.region(name):
            LOOPS[name]()
    dist.barrier()
    dist.destroy_process_group()
    # torch's own teardown at exit sometimes aborts a gloo rank ("terminate called without an
    # active exception"), untraced too (tests/trainers/programs/common.py: finish)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    chosen = sys.argv[2].split(",") if len(sys.argv) > 2 else list(LOOPS)
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(worker, args=(2, int(sys.argv[1]), chosen), nprocs=2, start_method="fork")
