"""Prints the tracebacks of errors raised through torch functions commtrace wraps
(``tracebacks.py PORT``): a backward pass, an object collective, group creation,
a spawned rank's exception as torch formats it for the parent, and a blocking
collective that fails after it was issued (raised at torch's work.wait(), not
inside the wrapper). Traced and untraced output must be the same."""
import sys
import threading
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def show(what, fn):
    try:
        fn()
    except Exception:  # noqa: BLE001
        print(f"== {what}\n{traceback.format_exc()}", flush=True)


def failing_backward():
    x = torch.ones(2, requires_grad=True)
    x.register_hook(lambda g: 1 / 0)
    x.sum().backward()


def unpicklable():
    dist.all_gather_object([None], threading.Lock())


def bad_group():
    dist.new_group([0], backend="no-such-backend")


def rank_raises(i):
    raise KeyError(f"rank {i}")


def spawned():
    try:
        mp.spawn(rank_raises, nprocs=1)
    except mp.ProcessRaisedException as e:
        raise RuntimeError(str(e)) from None


def failing_collective():
    dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(2.0))  # gloo: fails in its work


def failing_async_collective():
    dist.all_reduce(torch.ones(3), op=dist._make_nccl_premul_sum(2.0), async_op=True).wait()


if __name__ == "__main__":
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
    show("backward", failing_backward)
    show("object collective", unpicklable)
    show("group creation", bad_group)
    show("spawned rank", spawned)
    show("failed collective", failing_collective)
    show("failed async collective", failing_async_collective)
    dist.destroy_process_group()
