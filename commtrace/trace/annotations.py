"""Derive ``bucket`` and ``params`` from DDP's bucket layout (pure, over a frame).

DDP launches its gradient all_reduces in bucket order, so within one
(process, module, iteration) the k-th gradient all_reduce of the backward phase
is bucket k; likewise the shadow gradient all_reduces a joined rank makes
(detail ``join_shadow_grad``).
Buffer broadcasts (detail ``buffers``) carry the module's buffer names.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import schema



def _layouts(meta: list[dict]) -> tuple[dict, dict]:
    """(module -> sorted [(from_iteration, buckets)], module -> buffer names)."""
    layouts: dict = {}
    buffers: dict = {}
    for m in meta:
        mod = m.get("module")
        if not isinstance(mod, str):
            continue
        if m.get("type") == schema.META_DDP_BUCKETS and isinstance(m.get("buckets"), list):
            it = m.get("from_iteration") if isinstance(m.get("from_iteration"), int) else 1
            buckets = [[str(n) for n in b] for b in m["buckets"] if isinstance(b, list)]
            layouts.setdefault(mod, []).append((it, buckets))
        elif m.get("type") == schema.META_DDP_MODULE and isinstance(m.get("buffers"), list):
            buffers[mod] = [str(n) for n in m["buffers"]]
    for v in layouts.values():
        v.sort(key=lambda x: x[0])
    return layouts, buffers


def _layout_at(entries: list, iteration: int):
    chosen = None
    for it, buckets in entries:
        if it <= iteration:
            chosen = buckets
    return chosen


def assign_buckets(df: pd.DataFrame, ddp_meta_by_file: dict[str, list[dict]]) -> pd.DataFrame:
    """Fill ``bucket`` (Int64) and ``params`` (category) for DDP's ops."""
    if df.empty or "phase" not in df or not df["phase"].notna().any():
        return df
    phase = df["phase"].astype(object)
    detail = df["detail"].astype(object) if "detail" in df else pd.Series(None, index=df.index, dtype=object)
    grad_step = ((phase == "backward") & detail.isna()) | (detail == "join_shadow_grad")
    is_grad = (df["op"].astype(object) == "all_reduce") & grad_step & df["module"].notna()
    bucket = pd.array(np.zeros(len(df), dtype=np.int64), dtype="Int64")
    bucket[:] = pd.NA
    if is_grad.any():
        sub = df.loc[is_grad, ["file", "module", "iteration"]].astype(object)
        bucket[np.flatnonzero(is_grad.to_numpy())] = sub.groupby(list(sub.columns), sort=False).cumcount().to_numpy()
    params = np.full(len(df), None, dtype=object)
    parsed = {f: _layouts(m) for f, m in ddp_meta_by_file.items()}
    if parsed:
        files = df["file"].astype(object).to_numpy()
        modules = df["module"].astype(object).to_numpy()
        iters = df["iteration"].to_numpy()
        for i in np.flatnonzero(is_grad.to_numpy()):
            layouts, _ = parsed.get(files[i], ({}, {}))
            buckets = _layout_at(layouts.get(modules[i], []), int(iters[i]))
            b = bucket[i]
            if buckets is not None and b is not pd.NA and int(b) < len(buckets):
                params[i] = ",".join(buckets[int(b)])
        is_buf = (df["detail"].astype(object) == "buffers") & df["module"].notna()
        for i in np.flatnonzero(is_buf.to_numpy()):
            _, buffers = parsed.get(files[i], ({}, {}))
            names = buffers.get(modules[i])
            if names:
                params[i] = ",".join(names)
    df["bucket"] = bucket
    if any(p is not None for p in params):
        df["params"] = pd.Categorical(params)
    return df
