"""Runs every traced collective once, in a fixed order, on gloo.

Launch either under a launcher that sets RANK/WORLD_SIZE (mpirun + commtrace run,
torchrun) or alone: ``all_ops.py WORLD OUT_JSON`` spawns WORLD ranks itself with
torch.multiprocessing.spawn. Each rank writes ``OUT_JSON.rank<R>`` with what it
observed (errors caught, group names, functional-collective results) so the test
can compare them to the trace. No point-to-point ops here (see p2p.py).

ALL_OPS_LEAVE_OUT (comma-separated: reduce_scatter, all_to_all, all_to_all_single) names
the ops this torch's gloo lacks (tests/helpers.py: gloo_missing_ops): each call of such
an op is left out, and the rest run as usual.
"""
import json
import os

import torch
import torch.distributed as dist


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    W, r = world, rank
    left_out = set(os.environ.get("ALL_OPS_LEAVE_OUT", "").split(",")) - {""}
    res = {"rank": r, "world": W, "backend": dist.get_backend(), "errors": {}, "checks": {},
           "left_out": sorted(left_out)}
    f = lambda n, v=1.0: torch.full((n,), float(v))

    def check(name, ok):
        res["checks"][name] = bool(ok)

    # 1-3 all_reduce
    t = f(10, r + 1); dist.all_reduce(t); check("all_reduce", torch.equal(t, f(10, W * (W + 1) / 2)))
    t = f(10, r); dist.all_reduce(t, op=dist.ReduceOp.MAX); check("all_reduce_max", torch.equal(t, f(10, W - 1)))
    a, b = f(2), f(3)
    dist.all_reduce_coalesced([a, b]); check("all_reduce_coalesced", torch.equal(b, f(3, W)))
    # 4 broadcast from rank 1, 5 reduce to rank 0
    t = f(5, r); dist.broadcast(t, src=1); check("broadcast", torch.equal(t, f(5, 1)))
    t = f(6); dist.reduce(t, dst=0)
    # 6-9 all_gather family
    outs = [torch.empty(3) for _ in range(W)]
    dist.all_gather(outs, f(3, r)); check("all_gather", all(torch.equal(o, f(3, i)) for i, o in enumerate(outs)))
    o = torch.empty(3 * W); dist.all_gather_into_tensor(o, f(3, r)); check("all_gather_into_tensor", o[-1] == W - 1)
    o = torch.empty(3 * W); dist._all_gather_base(o, f(3, r))
    outs = [[torch.empty(2)] for _ in range(W)]  # one list per rank, one tensor per input
    dist.all_gather_coalesced(outs, [f(2, r)])
    check("all_gather_coalesced", all(torch.equal(x[0], f(2, i)) for i, x in enumerate(outs)))
    # 10 gather to 0, 11 scatter from 0
    gl = [torch.empty(4) for _ in range(W)] if r == 0 else None
    dist.gather(f(4, r), gl, dst=0)
    o = torch.empty(4)
    dist.scatter(o, [f(4, i) for i in range(W)] if r == 0 else None, src=0); check("scatter", torch.equal(o, f(4, r)))
    # 12-13 reduce_scatter
    if "reduce_scatter" not in left_out:
        o = torch.empty(2); dist.reduce_scatter(o, [f(2) for _ in range(W)])
        check("reduce_scatter", torch.equal(o, f(2, W)))
    o = torch.empty(2); dist.reduce_scatter_tensor(o, f(2 * W)); check("reduce_scatter_tensor", torch.equal(o, f(2, W)))
    # 14-15 all_to_all: list, then single with uneven splits (rank r sends j+1 elements to rank j)
    if "all_to_all" not in left_out:
        outs = [torch.empty(2) for _ in range(W)]
        dist.all_to_all(outs, [f(2, r) for _ in range(W)])
        check("all_to_all", all(torch.equal(x, f(2, i)) for i, x in enumerate(outs)))
    if "all_to_all_single" not in left_out:
        ins = [j + 1 for j in range(W)]
        o = torch.empty(W * (r + 1))
        dist.all_to_all_single(o, f(sum(ins), r), output_split_sizes=[r + 1] * W, input_split_sizes=ins)
        check("all_to_all_single", torch.equal(o, torch.cat([f(r + 1, i) for i in range(W)])))
    # 16-17 barriers
    dist.barrier()
    dist.monitored_barrier()
    # 18-19 async_op=True
    t = f(7); w = dist.all_reduce(t, async_op=True); w.wait(); check("async_all_reduce", torch.equal(t, f(7, W)))
    t = f(9, r); w = dist.broadcast(t, src=0, async_op=True); w.wait()
    o = torch.empty(2); w = dist.reduce_scatter_tensor(o, f(2 * W), async_op=True); w.wait()
    check("async_reduce_scatter_tensor", torch.equal(o, f(2, W)))
    # 20 unsupported on gloo: ReduceOp.PREMUL_SUM. The error must reach the caller
    # unchanged: compare with the same call on the untraced inner group.
    premul = dist._make_nccl_premul_sum(2.0)
    try:
        dist.all_reduce(f(3), op=premul)
    except Exception as e:  # noqa: BLE001
        res["errors"]["premul"] = [type(e).__name__, str(e)]
        inner = getattr(dist.distributed_c10d._get_default_group(), "inner", None)
        if inner is not None:
            try:
                opts = dist.AllreduceOptions(); opts.reduceOp = premul
                inner.allreduce([f(3)], opts).wait()
            except Exception as e2:  # noqa: BLE001
                res["errors"]["premul_inner"] = [type(e2).__name__, str(e2)]
    # 20b coalesced tensor ops called on the group object (no c10d wrapper function)
    pg = dist.distributed_c10d._get_default_group()
    o = torch.empty(3 * W); pg.allgather_into_tensor_coalesced([o], [f(3, r)]).wait()
    check("allgather_into_tensor_coalesced", o[-1] == W - 1)
    o = torch.empty(2); pg.reduce_scatter_tensor_coalesced([o], [f(2 * W)]).wait()
    check("reduce_scatter_tensor_coalesced", torch.equal(o, f(2, W)))
    # 20c the remaining Python-visible ProcessGroup ops, called directly without options
    o = torch.empty(3 * W); pg._allgather_base(o, f(3, r)).wait(); check("_allgather_base", o[-1] == W - 1)
    o = torch.empty(2); pg._reduce_scatter_base(o, f(2 * W)).wait(); check("_reduce_scatter_base", torch.equal(o, f(2, W)))
    if "all_to_all_single" not in left_out:
        o = torch.empty(2 * W); pg.alltoall_base(o, f(2 * W, r), [], []).wait()
        check("alltoall_base", torch.equal(o[-2:], f(2, W - 1)))
    # 21- object collectives
    objs = [None] * W
    dist.all_gather_object(objs, {"rank": r, "pad": "x" * r}); check("all_gather_object", objs[W - 1]["rank"] == W - 1)
    lst = [{"from": 0, "v": [1, 2, 3]}, "second"] if r == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0); check("broadcast_object_list", lst[1] == "second")
    gl = [None] * W if r == 0 else None
    dist.gather_object({"g": r}, gl, dst=0)
    so = [None]
    dist.scatter_object_list(so, [{"s": i, "p": "y" * i} for i in range(W)] if r == 0 else None, src=0)
    check("scatter_object_list", so[0]["s"] == r)
    # functional collectives (resolve the group by name, as compiled code does)
    import torch.distributed._functional_collectives as fc
    g = dist.group.WORLD
    x = fc.all_reduce(f(11, 1), "sum", g); check("fc_all_reduce", torch.equal(fc.wait_tensor(x), f(11, W)))
    x = fc.all_gather_tensor(f(5, r), 0, g); check("fc_all_gather", torch.equal(fc.wait_tensor(x)[-5:], f(5, W - 1)))
    x = fc.reduce_scatter_tensor(f(4 * W), "sum", 0, g); check("fc_reduce_scatter", torch.equal(fc.wait_tensor(x), f(4, W)))
    if "all_to_all_single" not in left_out:
        x = fc.all_to_all_single(f(3 * W, r), None, None, g)
        check("fc_all_to_all", torch.equal(fc.wait_tensor(x)[-3:], f(3, W - 1)))
    x = fc.broadcast(f(6, r), 0, g); check("fc_broadcast", torch.equal(fc.wait_tensor(x), f(6, 0)))
    # coalescing manager
    a, b = f(12), f(13)
    with dist._coalescing_manager(async_ops=False):
        dist.all_reduce(a)
        dist.all_reduce(b)
    check("coalesced", torch.equal(a, f(12, W)) and torch.equal(b, f(13, W)))
    # subgroups: new_group of ranks {0, W-1}; new_subgroups_by_enumeration
    members = [0, W - 1]
    sub = dist.new_group(members)
    if r in members:
        t = f(8); dist.all_reduce(t, group=sub); check("sub_all_reduce", torch.equal(t, f(8, 2)))
        t = f(3, r); dist.broadcast(t, src=W - 1, group=sub); check("sub_broadcast", torch.equal(t, f(3, W - 1)))
        res["sub"] = {"name": dist._get_process_group_name(sub), "ranks": dist.get_process_group_ranks(sub)}
    enum = [[0, 1]] + ([[2]] if W == 3 else [])
    cur, _ = dist.new_subgroups_by_enumeration(enum)
    t = f(16); dist.all_reduce(t, group=cur); check("subgroups_all_reduce", torch.equal(t, f(16, len(enum[0 if r < 2 else 1]))))
    res["cur"] = {"name": dist._get_process_group_name(cur), "ranks": dist.get_process_group_ranks(cur)}
    solo, _ = dist.new_subgroups(group_size=1)
    t = f(1); dist.all_reduce(t, group=solo); check("new_subgroups_all_reduce", torch.equal(t, f(1)))
    res["solo"] = {"name": dist._get_process_group_name(solo), "ranks": dist.get_process_group_ranks(solo)}
    res["world_name"] = dist._get_process_group_name(dist.group.WORLD)
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{r}", "w") as fh:
        json.dump(res, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main)
