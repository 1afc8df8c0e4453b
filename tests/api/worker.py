"""Ranks that turn tracing on themselves with commtrace.start() (no commtrace run).

``worker.py MODE WORLD PORT RUN_DIR OUT``: starts WORLD gloo ranks with
torch.multiprocessing.spawn (the parent is not traced). Each rank writes what
it saw to OUT.rank<R> (JSON). MODE:

* ``before``: start() before init_process_group, 3 DDP steps, never stop().
* ``after``:  init_process_group, a subgroup, 2 untraced all_reduces; start();
  3 DDP steps and an all_reduce on the subgroup; stop(); 2 untraced
  all_reduces; start() again (restart); 2 all_reduces; exit without stop().
* ``with``:   init; ``with commtrace.start(keep_last=4):`` 6 all_reduces; then
  2 untraced ones.
* ``pending``: init; start(); a subgroup; rank 0 leaves an async all_reduce and,
  on a thread, a blocking one on the subgroup running; stop(); start() again;
  only then rank 1 joins both (rank 0 tells it through the store); 1 all_reduce.
* ``hang``:   init; start(hang_timeout=1); stop(); start(hang_timeout=1) again;
  rank 1 joins an all_reduce once rank 0's watchdog has dumped it (no abort).
"""
import glob
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import commtrace


def steps(n: int) -> None:
    torch.manual_seed(0)
    model = DDP(nn.Linear(16, 16))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(n):
        opt.zero_grad()
        model(torch.ones(2, 16)).sum().backward()
        opt.step()


def all_reduces(n: int, group=None) -> float:
    x = torch.ones(4)
    for _ in range(n):
        dist.all_reduce(x, group=group)
    return float(x[0])


def env_of_interest() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith("COMMTRACE") or k == "PYTHONPATH"}


def main(rank: int, mode: str, world: int, run_dir: str, out: str) -> None:
    seen = {}
    init = dict(backend="gloo", init_method="env://", rank=rank, world_size=world)
    if mode == "before":
        s = commtrace.start(out_dir=run_dir)
        seen["run_dir"] = s.run_dir
        dist.init_process_group(**init)
        steps(3)
        seen["default_type"] = type(dist.group.WORLD).__name__
    elif mode == "after":
        dist.init_process_group(**init)
        sub = dist.new_group([0, 1])
        seen["untraced_before"] = all_reduces(2)
        seen["types_before"] = [type(dist.group.WORLD).__name__, type(sub).__name__]
        s = commtrace.start(out_dir=run_dir)
        seen["run_dir"] = s.run_dir
        # The subgroup as torch looks it up by name (functional collectives, DeviceMesh):
        # traced from now on. (The object new_group returned before start() is not.)
        registered = dist.distributed_c10d._resolve_process_group(sub.group_name)
        seen["types_after"] = [type(dist.group.WORLD).__name__, type(registered).__name__]
        seen["backend"] = dist.get_backend()
        steps(3)
        seen["sub_sum"] = all_reduces(1, registered)
        seen["stopped"] = commtrace.stop()
        seen["stop_again"] = commtrace.stop()
        seen["untraced_after"] = all_reduces(2)
        seen["restart"] = commtrace.start(out_dir=run_dir).run_dir
        seen["twice"] = repr(commtrace.start())
        seen["after_restart"] = all_reduces(2)
    elif mode == "with":
        dist.init_process_group(**init)
        seen["env_before"] = env_of_interest()
        with commtrace.start(out_dir=run_dir, keep_last=4) as s:
            seen["env_inside"] = env_of_interest()
            seen["run_dir"] = s.run_dir
            seen["in"] = all_reduces(6)
        seen["env_after"] = env_of_interest()
        seen["out"] = all_reduces(2)
    elif mode == "pending":
        dist.init_process_group(**init)
        store = dist.distributed_c10d._get_default_store()
        commtrace.start(out_dir=run_dir)
        sub = dist.new_group([0, 1])
        x, y = torch.ones(4), torch.ones(4)
        if rank == 0:
            work = dist.all_reduce(x, async_op=True)
            t = threading.Thread(target=dist.all_reduce, args=(y,), kwargs={"group": sub})
            t.start()
            from commtrace.capture.activate import active_recorder
            rec = active_recorder()
            while len(rec.unfinished()) < 2:  # both issued (rank 1 has joined neither)
                time.sleep(0.01)
        commtrace.stop()
        commtrace.start(out_dir=run_dir)
        if rank == 0:
            store.set("restarted", "1")
            work.wait()
            t.join()
        else:
            store.wait(["restarted"])
            dist.all_reduce(x)
            dist.all_reduce(y, group=sub)
        seen["sums"] = [float(x[0]), float(y[0]), all_reduces(1)]
    elif mode == "hang":
        dist.init_process_group(**init)
        commtrace.start(out_dir=run_dir, hang_timeout=1)
        all_reduces(1)
        commtrace.stop()
        commtrace.start(out_dir=run_dir, hang_timeout=1)
        if rank == 1:   # joins once rank 0's watchdog has dumped (a fixed 2.5 s could be too short under load)
            deadline = time.monotonic() + 40
            while not glob.glob(os.path.join(glob.escape(run_dir), "hang.rank0.pid*.json")) and time.monotonic() < deadline:
                time.sleep(0.05)
        seen["late"] = all_reduces(1)
    with open(f"{out}.rank{rank}", "w") as f:
        json.dump(seen, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp
    torch.set_num_threads(1)
    mode, world, port, run_dir, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    mp.spawn(main, args=(mode, world, run_dir, out), nprocs=world)
