"""Point-to-point ops on gloo: send/recv ring, isend/irecv, batch_isend_irecv, recv from any source.

``p2p.py WORLD PORT OUT`` starts WORLD ranks (or runs as one rank under a launcher).
Each rank writes OUT.rank<R> with the sources recv(src=None) reported.
"""
import json

import torch
import torch.distributed as dist


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    W, r = world, rank
    nxt, prv = (r + 1) % W, (r - 1) % W
    f = lambda n, v=1.0: torch.full((n,), float(v))
    res = {"rank": r, "ok": {}}
    # ring with blocking send/recv: 4 floats, tag 0
    buf = torch.empty(4)
    if r == 0:
        dist.send(f(4, r), nxt); dist.recv(buf, prv)
    else:
        dist.recv(buf, prv); dist.send(f(4, r), nxt)
    res["ok"]["ring"] = torch.equal(buf, f(4, prv))
    # isend/irecv: 5 floats, tag 3
    buf = torch.empty(5)
    ws = [dist.isend(f(5, r), nxt, tag=3), dist.irecv(buf, prv, tag=3)]
    for w in ws:
        w.wait()
    res["ok"]["isend"] = torch.equal(buf, f(5, prv))
    # batch_isend_irecv: 6 floats
    buf = torch.empty(6)
    ops = [dist.P2POp(dist.isend, f(6, r), nxt), dist.P2POp(dist.irecv, buf, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    res["ok"]["batch"] = torch.equal(buf, f(6, prv))
    # recv with src=None on rank 0 (recv_anysource), 2 floats, tag 7
    if r == 0:
        srcs = []
        for _ in range(W - 1):
            b = torch.empty(2)
            srcs.append(dist.recv(b, tag=7))
        res["anysource"] = srcs   # in the order received
    else:
        dist.send(f(2, r), 0, tag=7)
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{r}", "w") as fh:
        json.dump(res, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
