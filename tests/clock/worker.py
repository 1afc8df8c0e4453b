"""A short gloo job for the clock tests: all_reduce and barrier on 2 ranks.

    worker.py env                      rank and world from the launcher (mpirun, torchrun)
    worker.py spawn NODE NODES PORT    one mp.spawn'ed rank per simulated host (launched once per host)

With CLOCK_TEST_PROBE=PREFIX set, each rank writes PREFIX.rank<R> (JSON): torch's
bookkeeping of the user's groups right after init_process_group, which commtrace's
private clock group must leave as an untraced run has it.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.multiprocessing as mp

STEPS = 12


def probe(prefix: str) -> None:
    w = c10d._world
    state = {"group_count": w.group_count, "pg_names": sorted(w.pg_names.values()), "groups": len(w.pg_map),
             "world_size": dist.get_world_size(), "backend": dist.get_backend(),
             "default_pg_in_map": c10d._get_default_group() in w.pg_map}
    with open(f"{prefix}.rank{dist.get_rank()}", "w") as f:
        json.dump(state, f)


def train() -> None:
    dist.init_process_group("gloo")
    if os.environ.get("CLOCK_TEST_PROBE"):
        probe(os.environ["CLOCK_TEST_PROBE"])
    x = torch.ones(64)
    for step in range(STEPS):
        dist.all_reduce(x)
        if step % 4 == 3:
            dist.barrier()
    dist.destroy_process_group()


def spawned(_index: int, node: int, nodes: int, port: str) -> None:
    os.environ.update(RANK=str(node), WORLD_SIZE=str(nodes), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    train()


if __name__ == "__main__":
    if sys.argv[1] == "spawn":
        node, nodes, port = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        mp.spawn(spawned, args=(node, nodes, port), nprocs=1)
    else:
        train()
