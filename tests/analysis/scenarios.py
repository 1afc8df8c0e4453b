"""Constructed runs with hand-computed figures (times in µs; see each docstring)."""
from __future__ import annotations

from tracebuilder import Proc, write_run


def ddp_two_steps(run_dir, rank1_opt_end: float = 135.0) -> str:
    """Two ranks, two DDP steps with overlapping async gradient buckets.

    Per rank (rank 1 identical except its second optimizer step ends at
    ``rank1_opt_end`` instead of 130):

    ===========  =====================================================================
    0..5         all_gather, blocking, ddp_init/param_check   (before the first step)
    step 1       forward 10..20, backward 20..60, optimizer 60..70
                 buckets: all_reduce 30..50 (returns 31), 40..58 (returns 41)
    72..75       all_reduce, blocking, no phase                (between steps)
    step 2       forward 80..90 with DDP's buffer broadcast 82..86 (async, detail buffers),
                 backward 90..120, buckets 100..118 (ret 101), 110..119 (ret 111),
                 optimizer 120..130
    140..150     barrier, blocking                             (after the last step)
    ===========  =====================================================================

    Step 1, rank 0: span 10..70 = 60; comm = [30,58] = 28; waits = [30,31], [40,41]
    and DDP's tail [40,60] (last bucket launch .. end of backward); compute =
    [10,70] - waits = [10,30)+[31,40)+[60,70] = 39; exposed = comm - compute =
    [30,31]+[40,58] = 19; hidden = 9.
    Step 2, rank 0: span 80..130 = 50; comm = [82,86]+[100,119] = 23; compute =
    [80,82)+[86,100)+[101,110)+[120,130] = 35; exposed = [82,86]+[100,101]+[110,119]
    = 14.  Rank 1: span 80..135 = 55, compute 40, same comm and exposed.
    """
    procs = []
    for r in (0, 1):
        p = Proc(r)
        p.op("all_gather", 0, 5, is_async=False, phase="ddp_init", detail="param_check", nbytes=8)
        p.span("forward", 10, 20, 1, module="Net", iteration=1)
        p.span("backward", 20, 60, 1, module="Net", iteration=1)
        p.op("all_reduce", 30, 50, ret=31, phase="backward", module="Net", iteration=1, nbytes=4000)
        p.op("all_reduce", 40, 58, ret=41, phase="backward", module="Net", iteration=1, nbytes=2000)
        p.span("optimizer", 60, 70, 1, module="SGD", iteration=1)
        p.op("all_reduce", 72, 75, is_async=False, nbytes=4)
        p.span("forward", 80, 90, 2, module="Net", iteration=2)
        p.op("broadcast", 82, 86, phase="forward", detail="buffers", module="Net", iteration=2, nbytes=40, root=0)
        p.span("backward", 90, 120, 2, module="Net", iteration=2)
        p.op("all_reduce", 100, 118, ret=101, phase="backward", module="Net", iteration=2, nbytes=4000)
        p.op("all_reduce", 110, 119, ret=111, phase="backward", module="Net", iteration=2, nbytes=2000)
        p.span("optimizer", 120, 130 if r == 0 else rank1_opt_end, 2, module="SGD", iteration=2)
        p.op("barrier", 140, 150, is_async=False, nbytes=0)
        procs.append(p)
    return write_run(run_dir, procs, end_us=160)


def accumulation(run_dir) -> str:
    """One rank; gradient accumulation (no_sync) and an evaluation forward.

    step 1: forward 0..10, backward 10..20 (no_sync: no bucket), forward 20..30,
            backward 30..50 with a bucket 35..48 (ret 36), optimizer 50..55.
    eval:   forward 60..65 under no_grad with a buffer broadcast 61..63 -> between steps
    step 2: forward 70..80, backward 80..90 with a bucket 82..89 (ret 83), optimizer 90..95.
    Steps: 1 = [0,55], 2 micro-steps; 2 = [70,95], 1 micro-step (the eval forward,
    also numbered 2 by capture, is not a micro-step and does not start the step).
    """
    p = Proc(0, world_size=1)
    p.span("forward", 0, 10, 1, module="Net", iteration=1)
    p.span("backward", 10, 20, 1, module="Net", iteration=1)
    p.span("forward", 20, 30, 1, module="Net", iteration=2)
    p.span("backward", 30, 50, 1, module="Net", iteration=2)
    p.op("all_reduce", 35, 48, ret=36, phase="backward", module="Net", iteration=2, nbytes=400)
    p.span("optimizer", 50, 55, 1, module="SGD", iteration=2)
    p.span("forward", 60, 65, 2, module="Net", iteration=3, grad=False)
    p.op("broadcast", 61, 63, phase="forward", detail="buffers", module="Net", iteration=3, nbytes=40, root=0)
    p.span("forward", 70, 80, 2, module="Net", iteration=4)
    p.span("backward", 80, 90, 2, module="Net", iteration=4)
    p.op("all_reduce", 82, 89, ret=83, phase="backward", module="Net", iteration=4, nbytes=400)
    p.span("optimizer", 90, 95, 2, module="SGD", iteration=4)
    return write_run(run_dir, [p], end_us=100)


def zero_overlap(run_dir) -> str:
    """One rank; ZeroRedundancyOptimizer(overlap_with_ddp=True) steps inside DDP's comm hook.

    forward 0..10, backward 10..40 with buckets 15..25 (ret 16) and 20..30 (ret 21): DDP's tail
    [20,40]; the ZeRO optimizer span 25..38 inside it, with its broadcasts 30..36 and 33..37 (async).
    Step [0,38]; comm [15,37] = 22. Waits: [15,16], [20,25] (the tail before the local step),
    [33,38] (last broadcast launch to the span's end; the tail after it). Compute: [0,15] + [16,20]
    + [25,33] = 27; exposed: [15,16] + [20,25] + [33,37] = 10. (Counting the whole tail as waited:
    compute 19, exposed 18.)
    """
    p = Proc(0, world_size=1)
    p.span("forward", 0, 10, 1, module="Net", iteration=1)
    p.span("backward", 10, 40, 1, module="Net", iteration=1)
    p.op("all_reduce", 15, 25, ret=16, phase="backward", module="Net", bucket=0, iteration=1, nbytes=400)
    p.op("all_reduce", 20, 30, ret=21, phase="backward", module="Net", bucket=1, iteration=1, nbytes=400)
    p.span("optimizer", 25, 38, 1, module="ZeroRedundancyOptimizer", iteration=1)
    p.op("broadcast", 30, 36, phase="optimizer", iteration=1, nbytes=200, root=0)
    p.op("broadcast", 33, 37, phase="optimizer", iteration=1, nbytes=200, root=0)
    return write_run(run_dir, [p], end_us=50)


def join(run_dir) -> str:
    """Rank 0 trains 1 step then joins; rank 1 trains 2.

    Rank 0: step 1 (forward 0..10, backward 10..30 with bucket seq 1 12..28 of 4000 B,
    optimizer 30..35), then Join: a 4-byte join flag all_reduce (seq 2, detail
    join_count) 40..41 and the shadow of rank 1's bucket (seq 3, detail
    join_shadow_grad, 4000 B) 50..60.
    Rank 1: step 1 the same, step 2 (forward 40..45 with the join flag all_reduce
    seq 2 40..41 in phase forward/join_sync_flag, backward 45..65 with bucket seq 3
    50..60, optimizer 65..70).
    Per phase: backward/all_reduce: ops 3 (r0 seq1, r1 seq1, r1 seq3), collectives
    2; join/all_reduce/join_count: 1 op, 1 collective (seq 2 is also forward's);
    join/all_reduce/join_shadow_grad: 1 op, 1 collective; forward/join_sync_flag: 1.
    Split: seq 2 (forward: 1; join: 0) and seq 3 (backward: 1; join: 0).
    """
    p0, p1 = Proc(0), Proc(1)
    for p in (p0, p1):
        p.span("forward", 0, 10, 1, module="Net", iteration=1)
        p.span("backward", 10, 30, 1, module="Net", iteration=1)
        p.op("all_reduce", 12, 28, ret=13, phase="backward", module="Net", iteration=1, nbytes=4000)
        p.span("optimizer", 30, 35, 1, module="SGD", iteration=1)
    p0.op("all_reduce", 40, 41, is_async=False, phase="join", detail="join_count", nbytes=4, iteration=2)
    p0.op("all_reduce", 50, 60, is_async=False, phase="join", detail="join_shadow_grad", module="Net",
          nbytes=4000, iteration=2)
    p1.span("forward", 40, 45, 2, module="Net", iteration=2)
    p1.op("all_reduce", 40, 41, is_async=False, phase="forward", detail="join_sync_flag", module="Net",
          nbytes=4, iteration=2)
    p1.span("backward", 45, 65, 2, module="Net", iteration=2)
    p1.op("all_reduce", 50, 60, ret=51, phase="backward", module="Net", iteration=2, nbytes=4000)
    p1.span("optimizer", 65, 70, 2, module="SGD", iteration=2)
    return write_run(run_dir, [p0, p1], end_us=80)


def step_times(run_dir, durations: list[float]) -> str:
    """One rank whose steps last ``durations`` µs (forward/backward/optimizer back to
    back from t = 1000 * k), each with one blocking all_reduce of 100 B (2 µs) in backward."""
    p = Proc(0, world_size=1)
    for k, d in enumerate(durations, start=1):
        t = 1000.0 * k
        p.span("forward", t, t + d / 4, k, module="Net", iteration=k)
        p.span("backward", t + d / 4, t + d * 3 / 4, k, module="Net", iteration=k)
        p.op("all_reduce", t + d / 2, t + d / 2 + 2, is_async=False, phase="backward", module="Net",
             iteration=k, nbytes=100)
        p.span("optimizer", t + d * 3 / 4, t + d, k, module="SGD", iteration=k)
    return write_run(run_dir, [p], end_us=1000.0 * (len(durations) + 2))


def regions(run_dir) -> str:
    """Two ranks in a region "eval" (entered twice on rank 0) with a nested "eval/inner".

    rank 0: eval 0..10 and 20..30, eval/inner 22..26; ops 2..4 (in eval), 23..25 (inner), 40..41 (outside)
    rank 1: eval 0..20; op 5..15.
    eval: time = mean(20, 20) = 20 us; comm = mean(2 + 2, 10) = 7 us; ops 3; comm share 0.35.
    eval/inner: rank 0 only: time 4, comm 2, 1 op.
    """
    p0, p1 = Proc(0), Proc(1)
    p0.region("eval", 0, 10).region("eval", 20, 30).region("eval/inner", 22, 26)
    p0.op("all_reduce", 2, 4, is_async=False, region="eval", seq=1)
    p0.op("all_reduce", 23, 25, is_async=False, region="eval/inner", seq=2)
    p0.op("barrier", 40, 41, is_async=False, seq=3)
    p0.mark("epoch 1", 3).mark("epoch 2", 21)
    p1.region("eval", 0, 20)
    p1.op("all_reduce", 5, 15, is_async=False, region="eval", seq=1)
    return write_run(run_dir, [p0, p1], end_us=50)
