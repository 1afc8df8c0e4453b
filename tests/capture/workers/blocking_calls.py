"""Each torch.distributed function with an ``async_op`` argument, called blocking and async.

``blocking_calls.py WORLD PORT OUT`` starts WORLD gloo ranks. In order, each rank:
1. calls each function of CALLS once blocking (no async_op) and once with
   ``async_op=True`` and waits, less the ops gloo lacks (env BLOCKING_LEAVE_OUT);
2. calls all_reduce with async_op positional (True, then False) and barrier with
   (group, True) positional;
3. a nested pair: a blocking all_reduce of a tensor whose ``__torch_function__``
   (torch runs it inside all_reduce, before the op is issued) makes an async
   all_reduce first: the inner op is async, the outer blocking;
4. ``_coalescing_manager`` blocking, then with async_ops=True: two async all_reduces
   inside each, which torch fuses into one op issued as the block ends;
5. all_gather_object (its two all_gathers are blocking);
6. STEPS training steps, no DDP: each gradient averaged by a blocking all_reduce in a
   post-accumulate-grad hook (inside the backward pass); rank 1 sleeps there first, so
   rank 0 waits in its all_reduce.
Each rank writes OUT.rank<R>: the names of part 1 it ran, and those commtrace labels.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

STEPS = 2


def calls(r: int, W: int) -> dict:
    """name -> call(**async_kw): each makes one op on gloo (the deprecated ones included)."""
    f = lambda n=2: torch.ones(n)
    root_list = lambda: [f() for _ in range(W)] if r == 0 else None
    return {
        "broadcast": lambda **kw: dist.broadcast(f(), src=0, **kw),
        "all_reduce": lambda **kw: dist.all_reduce(f(), **kw),
        "all_reduce_coalesced": lambda **kw: dist.all_reduce_coalesced([f(), f(3)], **kw),
        "reduce": lambda **kw: dist.reduce(f(), dst=0, **kw),
        "all_gather": lambda **kw: dist.all_gather([f() for _ in range(W)], f(), **kw),
        "all_gather_into_tensor": lambda **kw: dist.all_gather_into_tensor(f(2 * W), f(), **kw),
        "_all_gather_base": lambda **kw: dist._all_gather_base(f(2 * W), f(), **kw),
        "all_gather_coalesced": lambda **kw: dist.all_gather_coalesced([[f()] for _ in range(W)], [f()],
                                                                       **kw),
        "gather": lambda **kw: dist.gather(f(), root_list(), dst=0, **kw),
        "scatter": lambda **kw: dist.scatter(f(), root_list(), src=0, **kw),
        "reduce_scatter": lambda **kw: dist.reduce_scatter(f(), [f() for _ in range(W)], **kw),
        "reduce_scatter_tensor": lambda **kw: dist.reduce_scatter_tensor(f(), f(2 * W), **kw),
        "_reduce_scatter_base": lambda **kw: dist._reduce_scatter_base(f(), f(2 * W), **kw),
        "all_to_all": lambda **kw: dist.all_to_all([f() for _ in range(W)], [f() for _ in range(W)], **kw),
        "all_to_all_single": lambda **kw: dist.all_to_all_single(f(2 * W), f(2 * W), **kw),
        "barrier": lambda **kw: dist.barrier(**kw),
    }


class IssuesFirst(torch.Tensor):
    """A tensor that makes an async all_reduce at its first torch function: inside a
    blocking all_reduce of it, as library code run by torch's own function would."""
    pending = True

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if cls.pending:
            cls.pending = False
            dist.all_reduce(torch.ones(5), async_op=True).wait()
        return super().__torch_function__(func, types, args, kwargs or {})


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    leave_out = set(os.environ.get("BLOCKING_LEAVE_OUT", "").split(",")) - {""}
    ran = []
    labelled = sorted(n for n in calls(rank, world) if getattr(getattr(dist, n), "_commtrace_labelled", None))
    for name, call in calls(rank, world).items():
        if name in leave_out:
            continue
        call()
        call(async_op=True).wait()
        ran.append(name)
    t = torch.ones(4)
    dist.all_reduce(t, dist.ReduceOp.SUM, None, True).wait()
    dist.all_reduce(t, dist.ReduceOp.SUM, None, False)
    dist.barrier(dist.group.WORLD, True).wait()
    dist.all_reduce(torch.ones(6).as_subclass(IssuesFirst))
    for async_ops in (False, True):  # one fused all_reduce each, issued as the block ends
        with dist.distributed_c10d._coalescing_manager(async_ops=async_ops) as cm:
            dist.all_reduce(torch.ones(2), async_op=True)
            dist.all_reduce(torch.ones(3), async_op=True)
        if async_ops:
            cm.wait()
    got = [None] * world
    dist.all_gather_object(got, {"rank": rank})
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def average(p):
        if rank == 1:
            time.sleep(0.2)
        dist.all_reduce(p.grad)
        p.grad /= world
    model.weight.register_post_accumulate_grad_hook(average)
    for _ in range(STEPS):
        opt.zero_grad()
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"ran": ran, "labelled": labelled}, fh)


if __name__ == "__main__":
    import torch.multiprocessing as mp
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = sys.argv[2]
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(main, args=(int(sys.argv[1]), sys.argv[3]), nprocs=int(sys.argv[1]),
                       start_method="fork")
