"""How much of DDP's gradient communication the backward pass hides (pure).

Per rank and iteration: the backward span (from the ``span`` marks) and the
gradient all_reduces of that iteration (phase ``backward`` with a ``bucket``).
DDP's backward span also contains its final wait for the buckets, so the end of
gradient *computation* is taken as the launch of the last bucket (a bucket is
launched as soon as its last gradient is computed). Communication before that
point is hidden (overlapped with computation); after it, exposed (the step
waits for it). Averaged over ranks per iteration.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ["backward_ns", "grad_comm_ns", "overlapped_ns", "exposed_ns", "overlap_pct"]


def backward_overlap(frame: pd.DataFrame, spans: pd.DataFrame | None) -> pd.DataFrame:
    if spans is None or len(spans) == 0 or len(frame) == 0 or "bucket" not in frame:
        return pd.DataFrame(columns=COLUMNS)
    bw = spans[spans["phase"] == "backward"]
    grad = frame[frame["bucket"].notna().to_numpy() & (frame["phase"].astype(object) == "backward").to_numpy()
                 & frame["t_end_ns"].notna().to_numpy()]
    if len(bw) == 0 or len(grad) == 0:
        return pd.DataFrame(columns=COLUMNS)
    g = pd.DataFrame({"file": grad["file"].astype(str).to_numpy(), "iteration": grad["iteration"].to_numpy(),
                      "s": grad["t_start_ns"].to_numpy(np.int64),
                      "e": grad["t_end_ns"].to_numpy(dtype=np.int64, na_value=0)})
    b = pd.DataFrame({"file": bw["file"].astype(str).to_numpy(), "iteration": bw["iteration"].to_numpy(),
                      "bs": bw["t_begin_ns"].to_numpy(np.int64), "be": bw["t_end_ns"].to_numpy(np.int64)})
    b = b.groupby(["file", "iteration"], as_index=False).agg(bs=("bs", "min"), be=("be", "max"))
    j = g.merge(b, on=["file", "iteration"], how="inner")
    if len(j) == 0:
        return pd.DataFrame(columns=COLUMNS)
    compute_end = j.groupby(["file", "iteration"])["s"].transform("max")
    dur = (j["e"] - j["s"]).clip(lower=0)
    inside = (np.minimum(j["e"], compute_end) - np.maximum(j["s"], j["bs"])).clip(lower=0)
    after = (j["e"] - np.maximum(j["s"], compute_end)).clip(lower=0)
    j = j.assign(dur=dur, inside=inside, after=after)
    # Per rank: the sum of the buckets' own durations and its split.
    per = j.groupby(["file", "iteration"]).agg(grad_comm_ns=("dur", "sum"), overlapped_ns=("inside", "sum"),
                                               exposed_ns=("after", "sum"), bs=("bs", "first"), be=("be", "first"))
    per["backward_ns"] = per["be"] - per["bs"]
    out = per.groupby("iteration")[["backward_ns", "grad_comm_ns", "overlapped_ns", "exposed_ns"]].mean()
    out["overlap_pct"] = np.where(out["grad_comm_ns"] > 0, 100.0 * out["overlapped_ns"] / out["grad_comm_ns"], np.nan)
    return out[COLUMNS]
