"""Runs under mpirun: the same DDP training on gloo, then on init_process_group("mpi").

Both runs use the same seeds, data order and model; the per-step losses and
final weights must be identical (bit for bit with 2 ranks; with 3 ranks the
two libraries may add the three gradient contributions in different orders,
so there the tolerance is one float32 rounding per step).
Exit 1 with details on mismatch.
"""
from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import commtrace.mpi
from commtrace import mpienv

comm = mpienv.world()
rank, size = comm.Get_rank(), comm.Get_size()
# MASTER_ADDR, MASTER_PORT: the test's (conftest.mpirun)
commtrace.mpi.install()
HIDDEN = int(sys.argv[1]) if len(sys.argv) > 1 else 300
# Each run's DDP (its reducer holds the group; its module, the buffers the last broadcast
# read) lives to the end: gloo's worker thread may still be dropping that broadcast when
# the group is freed, and were its tensor's last reference dropped there, freeing it would
# need the GIL the freeing thread holds: torch 2.4.1 deadlocked so in ~ProcessGroupGloo
# (1 of 36 runs of this worker; tests/transparency/probe.py keeps its tensor for the same reason).
KEEP_ALIVE = []


def train(backend):
    if backend == "mpi":
        dist.init_process_group("mpi")
    else:
        dist.init_process_group(backend, rank=rank, world_size=size)
    assert dist.get_backend() == backend, dist.get_backend()
    torch.manual_seed(0)
    x, y = torch.randn(192, 10), torch.randn(192, 5)
    ds = TensorDataset(x, y)
    sampler = DistributedSampler(ds, num_replicas=size, rank=rank, seed=0)
    loader = DataLoader(ds, batch_size=16, sampler=sampler)
    model = nn.Sequential(nn.Linear(10, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 5), nn.BatchNorm1d(5))
    ddp = DDP(model, bucket_cap_mb=1)     # several buckets -> overlapping async all_reduces
    KEEP_ALIVE.append(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    losses = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    state = [p.detach().clone() for p in model.parameters()]
    dist.destroy_process_group()
    return losses, state


g_losses, g_state = train("gloo")
m_losses, m_state = train("mpi")
exact = size <= 2
bad = []
for i, (a, b) in enumerate(zip(g_losses, m_losses)):
    if (a != b) if exact else abs(a - b) > 1e-5 * max(1.0, abs(a)):
        bad.append(f"step {i}: gloo {a!r} mpi {b!r}")
for i, (a, b) in enumerate(zip(g_state, m_state)):
    if not (torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-5, atol=1e-6)):
        bad.append(f"param {i} differs (max abs diff {(a - b).abs().max().item()})")
if len(g_losses) != len(m_losses):
    bad.append(f"step count {len(g_losses)} vs {len(m_losses)}")
if rank == 0:
    print(f"ddp gloo-vs-mpi: {len(m_losses)} steps on {size} ranks, exact={exact}, "
          f"{len(bad)} mismatches; last loss gloo {g_losses[-1]:.7f} mpi {m_losses[-1]:.7f}")
    for b in bad[:20]:
        print(b)
# torch 2.13 exit race, untraced: gloo's worker thread destroys the last
# finished Work (which may take the GIL) just after the caller moved on; if
# the interpreter is finalizing by then the process aborts. commtrace pauses
# at exit for this (Recorder._close_at_exit); this untraced baseline pauses itself.
time.sleep(0.05)
sys.exit(1 if bad else 0)
