"""torch.distributed.checkpoint's collectives are phase ``checkpoint`` (save, async_save in its
executor thread, load, the state-dict helpers), and a program thread's scope reads its own
context, not the main thread's. tests/capture/workers/checkpoint.py."""
from __future__ import annotations

import helpers as h

W = 2


def test_checkpoint_phase_and_side_thread_scopes(tmp_path):
    res = h.spawn_traced("checkpoint.py", W, tmp_path, timeout=180)
    res.result.check(0)
    df = res.frame
    for r in range(W):
        assert res.rank_json(r) == [1] * W
        d = df[df["rank"] == r]
        ckpt = d[d["phase"] == "checkpoint"]
        # Every op DCP issues is phase checkpoint: the executor thread's too (before, its scope
        # saw the main thread's phase checkpoint as "a phase is set" and left its own ops without).
        threads = set(ckpt["thread"].astype(str))   # the executor's: "ThreadPoolExecutor-0_0" on torch 2.4
        assert len(threads) == 2 and "MainThread" in threads and "side" not in threads, threads
        # the program's own ops after the checkpoints have no phase: the regions' all_reduces, its
        # object collective
        unphased = d[d["phase"].isna()]
        got = [(str(t), o, str(det)) for t, o, det in zip(unphased["thread"], unphased["op"], unphased["detail"])]
        assert sorted(got) == sorted([("side", "all_reduce", "nan"), ("MainThread", "all_reduce", "nan"),
                                      ("MainThread", "all_gather", "object_sizes"),
                                      ("MainThread", "all_gather", "object_payload")]), got
        # a region opened in a program thread is its own, not nested in the main thread's
        regions = d[d["op"] == "all_reduce"].dropna(subset=["region"])
        assert dict(zip(regions["thread"].astype(str), regions["region"].astype(str))) == \
            {"side": "side", "MainThread": "main"}
