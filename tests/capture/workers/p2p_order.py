"""Sends received out of their seq order, on 3 gloo ranks: what pairs a recv with its send.

Rank 1 isends four messages to rank 0 (tags 2, 4, 3, 4; 2, 4, 3 and 5 floats); rank 0 takes the
first with a recv from any source (tag 2), then posts irecvs from rank 1 with tags 4, 3, 4: each
takes the oldest message of its (sender, tag), so the tag-4 irecvs get the 4- and 5-float ones.
Rank 2 sends rank 0 two messages with tag 0 (6 and 7 floats). Capture numbers rank 0's recv from
any source (tag 2) as a recv from rank 2, and rank 1's sends per peer over all tags, so the
records' seqs pair none of rank 0's recvs with the send it took.

``p2p_order.py WORLD PORT OUT``; each rank writes OUT.rank<R> with the sizes it received.
"""
import json

import torch
import torch.distributed as dist

# rank 1's messages to rank 0: (tag, floats), in send order
FROM_1 = [(2, 2), (4, 4), (3, 3), (4, 5)]
# rank 0's irecvs from rank 1 after the recv from any source: (tag, floats), in post order
RECVS_FROM_1 = [(4, 4), (3, 3), (4, 5)]
FROM_2 = [(0, 6), (0, 7)]


def main(rank, world, out):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    res = {"rank": rank, "got": []}
    if rank == 0:
        b = torch.empty(FROM_1[0][1])
        res["anysource"] = dist.recv(b, tag=FROM_1[0][0])
        res["got"].append(b.numel())
        bufs = [torch.empty(n) for _, n in RECVS_FROM_1]
        ws = [dist.irecv(b, 1, tag=t) for b, (t, _) in zip(bufs, RECVS_FROM_1)]
        for w in ws:
            w.wait()
        res["got"] += [int(b[0].item()) for b in bufs]      # each message's first value: its size
        for t, n in FROM_2:
            b = torch.empty(n)
            dist.recv(b, 2, tag=t)
            res["got"].append(int(b[0].item()))
    elif rank == 1:
        ws = [dist.isend(torch.full((n,), float(n)), 0, tag=t) for t, n in FROM_1]
        for w in ws:
            w.wait()
    elif rank == 2:
        for t, n in FROM_2:
            dist.send(torch.full((n,), float(n)), 0, tag=t)
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump(res, fh)


if __name__ == "__main__":
    from ranks_entry import run_ranks
    run_ranks(main, start="fork")
