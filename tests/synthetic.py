"""Write realistic, DDP-like synthetic runs as real trace files (tests, benchmarks, docs/img).

Every rank runs the same op sequence: a few parameter broadcasts at start-up,
then per training step ``buckets`` async gradient all_reduces (overlapping each
other, like DDP's buckets), an all_gather of a metric and, every 10 steps, a
barrier. Times are vectorized: a collective starts when its last caller arrives,
so per-rank arrival jitter shows up as skew, and ``slow_rank`` arrives late.
The files go through ``TraceWriter`` and ``schema``, so the reader sees exactly
what a real run would produce.
"""
from __future__ import annotations

import os

import numpy as np

from commtrace.trace import schema
from commtrace.trace.writer import TraceWriter

# (op, variant, bytes per rank, out_bytes, async, phase)
_STARTUP = [
    ("broadcast", "broadcast", 80, 80, True, "init"),
    ("broadcast", "broadcast", 4_000_000, 4_000_000, True, "init"),
    ("broadcast", "broadcast", 8, 8, True, "init"),
]


def _step_template(buckets: int, world: int) -> list[tuple]:
    t = []
    for b in range(buckets):
        size = 25 * 2**20 if b < buckets - 1 else 3 * 2**20
        t.append(("all_reduce", "allreduce", size, size, True, "backward", b))
    t.append(("all_gather", "allgather", 8, 8 * world, False, "eval", None))
    return t


def write_synthetic_run(run_dir: str, ranks: int = 4, ops_per_rank: int = 1000, seed: int = 0, *,
                        buckets: int = 4, slow_rank: int | None = None, slow_ns: float = 2e6,
                        run_id: str = "synthetic-run", annotate: bool = True, p2p: bool = False,
                        hosts: int = 1, missing_ranks: tuple = (), start_ns: int = 1_000_000_000_000,
                        command: list | None = None, setup_ns: float = 0.0, end_observed: bool = False) -> str:
    """Write ``ranks`` trace files of ``ops_per_rank`` records each into ``run_dir``.

    ``annotate`` fills phase/iteration/bucket as the annotation hooks would.
    ``p2p`` appends a ring of send/recv pairs at every step. ``setup_ns`` lengthens the
    first start-up op (like NCCL's communicator set-up inside the first collective on a
    GPU); ``end_observed`` flags every op's end as observed by polling (an upper bound,
    as a gloo-on-CUDA run records). Returns ``run_dir``.
    """
    rng = np.random.default_rng(seed)
    os.makedirs(run_dir, exist_ok=True)
    # -- the op sequence (same on every rank) -----------------------------------
    sigs: list[dict] = []
    sig_of: dict = {}

    def sig(op, variant, nbytes, out_bytes, is_async, phase, bucket=None, root=None, tag=None):
        key = (op, variant, nbytes, out_bytes, is_async, phase, bucket, root, tag)
        if key not in sig_of:
            esize = 8 if nbytes == 8 or op == "all_gather" else 4
            dtype = "int64" if esize == 8 else "float32"
            n = nbytes // esize
            out_n = out_bytes // esize
            s = {"type": schema.META_SIG, "id": len(sigs), "op": op, "variant": variant,
                 "shapes": [[n]] if op != "barrier" else [], "out_shapes": [[out_n]] if op != "barrier" else [],
                 "dtype": dtype if op != "barrier" else None, "bytes": nbytes if op != "barrier" else 0,
                 "out_bytes": out_bytes if op != "barrier" else 0, "device": "cpu",
                 "reduce_op": "SUM" if op == "all_reduce" else None, "root": root, "tag": tag,
                 "async": is_async, "thread": "MainThread"}
            if annotate:
                s.update({"phase": phase, "bucket": bucket, "module": "DistributedDataParallel" if phase == "backward" else None})
            sig_of[key] = len(sigs)
            sigs.append(s)
        return sig_of[key]

    seq_sig, seq_async, seq_iter, seq_bytes, seq_p2p = [], [], [], [], []
    for op, var, nb, ob, asy, ph in _STARTUP:
        seq_sig.append(sig(op, var, nb, ob, asy, ph, root=0))
        seq_async.append(asy); seq_iter.append(0); seq_bytes.append(nb); seq_p2p.append(False)
    step_t = _step_template(buckets, ranks)
    it = 0
    while len(seq_sig) < ops_per_rank:
        it += 1
        for op, var, nb, ob, asy, ph, b in step_t:
            seq_sig.append(sig(op, var, nb, ob, asy, ph, b))
            seq_async.append(asy); seq_iter.append(it if annotate else 0); seq_bytes.append(nb); seq_p2p.append(False)
        if p2p:
            seq_sig.append(-1)  # placeholder: send/recv pair, sig depends on the rank
            seq_async.append(False); seq_iter.append(it if annotate else 0); seq_bytes.append(4096); seq_p2p.append(True)
        if it % 10 == 0:
            seq_sig.append(sig("barrier", "barrier", 0, 0, False, None))
            seq_async.append(False); seq_iter.append(it if annotate else 0); seq_bytes.append(0); seq_p2p.append(False)
    n = ops_per_rank
    seq_sig = np.array(seq_sig[:n], dtype=np.int64)
    seq_async = np.array(seq_async[:n], dtype=bool)
    seq_iter = np.array(seq_iter[:n], dtype=np.uint32)
    seq_bytes = np.array(seq_bytes[:n], dtype=np.float64)
    seq_p2p = np.array(seq_p2p[:n], dtype=bool)
    # p2p: every rank sends to rank+1 and receives from rank-1; send first on even ranks.
    p2p_sig = {}
    if p2p:
        for r in range(ranks):
            p2p_sig[r] = (sig("send", "send", 4096, 0, False, "pipeline", root=(r + 1) % ranks, tag=0),
                          sig("recv", "recv", 4096, 4096, False, "pipeline", root=(r - 1) % ranks, tag=0))

    # -- times: ranks x ops ------------------------------------------------------
    jitter = rng.exponential(20_000.0, size=(ranks, n)).astype(np.float32)   # arrival jitter, ns
    if slow_rank is not None and 0 <= slow_rank < ranks:
        jitter[slow_rank] += np.float32(slow_ns)
    xfer = 30_000.0 + seq_bytes / 2.0                                         # ~2 GB/s plus latency
    xfer *= rng.lognormal(0.0, 0.1, size=n)
    if n:
        xfer[0] += setup_ns
    gap = np.where(seq_async, 5_000.0, 500_000.0) + rng.exponential(np.where(seq_async, 20_000.0, 200_000.0))
    maxj = jitter.max(axis=0).astype(np.float64)
    # One communication stream: an op completes after its last caller arrived and after
    # the previous op completed. Async ops (DDP buckets) are called back to back; a
    # blocking op waits for everything before it (like DDP's wait before the optimizer).
    base = np.empty(n)
    end = np.empty(n)
    b, e_prev = float(start_ns), float(start_ns)
    maxj_l, xfer_l, gap_l, asy_l = maxj.tolist(), xfer.tolist(), gap.tolist(), seq_async.tolist()
    for k in range(n):
        if k and not asy_l[k]:
            b = max(b, e_prev) + gap_l[k]          # blocking call: after the stream drained
        base[k] = b
        e_prev = max(e_prev, b + maxj_l[k]) + xfer_l[k]
        end[k] = e_prev
        b = b + maxj_l[k] + (gap_l[k] if asy_l[k] else 0.0)
        if not asy_l[k]:
            b = e_prev + gap_l[k]                   # compute after a blocking op
    seqs = np.arange(1, n + 1, dtype=np.uint32)
    bucket_sigs = [s["id"] for s in sigs if s.get("phase") == "backward"]
    t_wall0 = 1_790_000_000_000_000_000
    t_last = float(end.max()) if n else float(start_ns)
    for r in range(ranks):
        if r in missing_ranks:
            continue
        t_call = (base + jitter[r]).astype(np.int64)
        t_end = end + rng.exponential(2_000.0, size=n)
        d_end = (t_end - t_call).astype(np.float32)
        d_ret = np.where(seq_async, rng.exponential(5_000.0, size=n), d_end).astype(np.float32)
        rec = np.zeros(n, dtype=schema.OP_RECORD)
        rec["t_call"] = t_call
        rec["d_return"] = d_ret
        rec["d_end"] = d_end
        rec["seq"] = seqs
        rec["sig"] = seq_sig
        rec["iteration"] = seq_iter
        rec["group"] = 0
        if end_observed:
            rec["flags"] |= schema.FLAG_END_OBSERVED
        if p2p and seq_p2p.any():
            # Even ranks send then recv; odd ranks recv then send: one op slot each.
            # A send and its recv share the per-peer sequence number (the step).
            send_sig, recv_sig = p2p_sig[r]
            rec["sig"][seq_p2p] = send_sig if r % 2 == 0 else recv_sig
            rec["seq"][seq_p2p] = np.arange(1, int(seq_p2p.sum()) + 1)
            # Collective seq numbers skip p2p slots.
            coll = ~seq_p2p
            rec["seq"][coll] = np.arange(1, int(coll.sum()) + 1)
        host = f"node{r * hosts // ranks}"
        pid = 10_000 + r
        meta = [
            {"type": schema.META_HEADER, "format": schema.FORMAT_NAME, "version": schema.FORMAT_VERSION,
             "source": "python", "record_size": schema.RECORD_SIZE, "commtrace_version": "synthetic",
             "torch_version": "synthetic", "host": host, "pid": pid, "rank": r, "launcher": "synthetic",
             "run_id": run_id, "command": command or ["train.py", "--synthetic"],
             "t_wall_ns": t_wall0, "t_mono_ns": start_ns - 50_000_000},
            {"type": schema.META_WORLD, "world": 0, "t_mono_ns": start_ns - 1_000_000, "world_id": "w0",
             "rank": r, "world_size": ranks, "backend": "gloo"},
            {"type": schema.META_GROUP, "id": 0, "world": 0, "world_id": "w0", "name": "0", "desc": "default_pg",
             "backend": "gloo", "size": ranks, "rank": r, "ranks": list(range(ranks))},
        ]
        meta.extend(sigs)
        if hosts > 1:
            meta.append({"type": schema.META_CLOCK, "offset_ns": 0, "rtt_ns": 10_000, "t_mono_ns": start_ns, "when": "start"})
        spans = None
        if annotate:
            meta += [{"type": schema.META_LABEL, "id": i, "text": t} for i, t in enumerate(_SPAN_LABELS)]
            spans = _compute_spans(t_call, t_end.astype(np.int64), seq_iter, np.isin(seq_sig, bucket_sigs))
        w = TraceWriter(run_dir, f"rank{r}.pid{pid}")
        w.write(meta, rec, spans)
        w.write([{"type": schema.META_END, "exit_code": 0, "how": "exit", "t_wall_ns": t_wall0 + int(t_last - start_ns),
                  "t_mono_ns": int(t_last) + 10_000_000}], None)
        w.close()
    return run_dir


_SPAN_LABELS = ("DistributedDataParallel", "SGD")


def _compute_spans(t_call: np.ndarray, t_end: np.ndarray, iteration: np.ndarray, bucket: np.ndarray):
    """One rank's compute span records, as DDP training would record them: per
    iteration a forward from the previous op's end to the first bucket's launch, a
    backward until the last bucket completes (DDP waits for them in it), then a
    100 us optimizer step. Iteration k is step k."""
    its = iteration[bucket].astype(np.int64)
    if not len(its):
        return None
    first = np.full(its.max() + 1, np.iinfo(np.int64).max)
    last = np.zeros(its.max() + 1, np.int64)
    np.minimum.at(first, its, t_call[bucket])
    np.maximum.at(last, its, t_end[bucket])
    order = np.argsort(t_call, kind="stable")
    reach = np.maximum.accumulate(t_end[order])
    k = np.searchsorted(t_call[order], first, side="left")   # the last op end before each first bucket
    prev_end = np.where(k > 0, reach[np.maximum(k - 1, 0)], first - 100_000)
    steps = np.unique(its)
    fb, be = first[steps], last[steps]
    fw = np.minimum(prev_end[steps] + 1, fb)
    out = np.zeros(3 * len(steps), dtype=schema.SPAN_RECORD)
    for j, (phase, b, e, label) in enumerate((("forward", fw, fb, 0), ("backward", fb, be, 0),
                                              ("optimizer", be, be + 100_000, 1))):
        part = out[j::3]
        part["phase"] = schema.SPAN_PHASES.index(phase)
        part["t_begin"], part["t_end"] = b, e
        part["step"] = part["iteration"] = steps
        part["label"] = label
        part["flags"] = schema.SPAN_FLAG_GRAD
    return out
