"""Sparse tensors on 2 gloo ranks: a plain ``dist.all_reduce`` of a sparse COO tensor whose nnz
differs between ranks and between calls, then DDP over ``nn.Embedding(sparse=True)`` with a batch
of a different length on each rank (its gradient's nnz is the number of indices looked up).

``sparse.py WORLD PORT OUT``; each rank writes OUT.rank<R> with the nnz of what it passed in.
"""
import json

import torch
import torch.distributed as dist
from torch import nn

ROWS, DIM = 50, 4


def coo(nnz: int, rank: int) -> torch.Tensor:
    idx = torch.tensor([[(rank * 7 + 3 * i) % ROWS for i in range(nnz)]])
    return torch.sparse_coo_tensor(idx, torch.ones(nnz, DIM), (ROWS, DIM), check_invariants=True)


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    passed = []
    for call in range(2):
        nnz = 2 + 3 * rank + call  # rank 0: 2, 3; rank 1: 5, 6
        t = coo(nnz, rank)
        passed.append(t._nnz())
        dist.all_reduce(t)
    model = nn.parallel.DistributedDataParallel(nn.Embedding(ROWS, DIM, sparse=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lookups = []
    for step in range(2):
        n = 6 + 4 * rank  # rank 0 looks up 6 indices, rank 1 10
        model(torch.arange(n) % ROWS).sum().backward()
        lookups.append(n)
        opt.step()
        opt.zero_grad()
    dist.barrier()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"nnz": passed, "lookups": lookups}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
