"""Object collectives on two groups of 2 forked gloo ranks: the default group
(native wrapper where built) and one made with COMMTRACE_NATIVE=0 (Python
wrapper). usage: objects_worker.py OUT_PREFIX PORT"""
import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp


def collectives(group, rank, tag):
    got = [None, None]
    dist.all_gather_object(got, {"rank": rank, "tag": tag}, group=group)
    objs = [f"hello {tag}"] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0, group=group)
    gathered = [None, None] if rank == 0 else None
    dist.gather_object(rank * 10, gathered, dst=0, group=group)
    out = [None]
    dist.scatter_object_list(out, [["a"], ["b", "b"]] if rank == 0 else None, src=0, group=group)
    if rank == 0:
        dist.send_object_list([tag * 3], dst=1, group=group)
    else:
        msg = [None]
        dist.recv_object_list(msg, src=0, group=group)
    return {"all_gather": got, "broadcast": objs, "gather": gathered, "scatter": out}


def worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    res = {"default": collectives(None, rank, "native")}
    os.environ["COMMTRACE_NATIVE"] = "0"  # the next group gets the Python wrapper
    py_group = dist.new_group([0, 1])
    res["python"] = collectives(py_group, rank, "python")
    dist.all_reduce(__import__("torch").ones(1))  # a plain collective: no api label
    with open(f"{out}.rank{rank}", "w") as f:
        f.write(repr(res))
    dist.destroy_process_group()


if __name__ == "__main__":
    # forked: tests/capture/workers/ranks_entry.py says why
    mp.start_processes(worker, args=(int(sys.argv[2]), sys.argv[1]), nprocs=2, start_method="fork")
