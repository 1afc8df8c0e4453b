"""Arrival skew: for each collective, last caller minus first caller, and who was last."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .match import Matched


def collective_instances(matched: Matched) -> pd.DataFrame:
    """Instances with at least two callers that are not point-to-point."""
    inst = matched.instances
    if len(inst) == 0:
        return inst
    return inst[(~inst["p2p"].to_numpy(dtype=bool)) & (inst["ranks"].to_numpy() >= 2)]


def skew_summary(matched: Matched, top: int = 10) -> dict:
    """``top``: the instances with the largest spread; ``stragglers``: per rank, how often
    it arrived last and the total time the others waited for it; ``by_op``: spread stats."""
    inst = collective_instances(matched)
    if len(inst) == 0:
        empty = pd.DataFrame(columns=["last", "wait_ns", "mean_spread_ns", "share_last"])
        return {"top": inst, "stragglers": empty, "by_op": pd.DataFrame(), "instances": 0}
    spread = inst["spread_ns"].to_numpy(dtype=np.float64)
    topi = inst.iloc[np.argsort(-spread, kind="stable")[:top]]
    g = inst.groupby("last_rank", sort=True)["spread_ns"]
    strag = pd.DataFrame({"last": g.size(), "wait_ns": g.sum(), "mean_spread_ns": g.mean()})
    strag["share_last"] = strag["last"] / len(inst)
    strag.index.name = "rank"
    strag = strag.sort_values("wait_ns", ascending=False)
    og = inst.groupby("op", observed=True, sort=True)["spread_ns"]
    by_op = pd.DataFrame({"collectives": og.size(), "mean_ns": og.mean(), "p50_ns": og.quantile(0.5),
                          "p99_ns": og.quantile(0.99), "max_ns": og.max()})
    return {"top": topi, "stragglers": strag.head(top), "by_op": by_op, "instances": int(len(inst))}
