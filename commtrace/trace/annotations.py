"""Derive ``bucket`` and ``params`` from DDP's bucket layout (pure, over a frame).

DDP launches its gradient all_reduces in bucket order, so within one
(process, module, iteration) the k-th gradient all_reduce of the backward phase
is bucket k; likewise the shadow gradient all_reduces a joined rank makes
(detail ``join_shadow_grad``). Buffer broadcasts (detail ``buffers``) carry the
module's buffer names. Works on categorical codes: no per-row Python objects.
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


def _is(col: pd.Series, value: str) -> np.ndarray:
    """Rows of a categorical column equal to ``value`` (by code)."""
    cats = col.cat.categories
    if value not in cats:
        return np.zeros(len(col), dtype=bool)
    return col.cat.codes.to_numpy() == cats.get_loc(value)


def _cumcount(group: np.ndarray, key: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements share its (group, key).

    Elements are in time order; ``group`` is a small code (the process), so a
    stable radix sort on it is cheap, and within a process the key (module,
    iteration) normally only grows -- then counting is a run-length pass.
    Falls back to a full sort when it does not.
    """
    order = np.argsort(group, kind="stable")
    gs, sk = group[order], key[order]
    same_group = gs[1:] == gs[:-1]
    if not ((sk[1:] >= sk[:-1]) | ~same_group).all():  # a key recurs after another
        full = (gs.astype(np.int64) << 48) + sk
        order2 = np.argsort(full, kind="stable")
        del full
        order, gs, sk = order[order2], gs[order2], sk[order2]
        same_group = gs[1:] == gs[:-1]
    new = np.r_[True, (sk[1:] != sk[:-1]) | ~same_group]
    del gs, sk, same_group
    pos = np.arange(len(new))
    start = np.maximum.accumulate(np.where(new, pos, 0))
    out = np.empty(len(new), dtype=np.int64)
    out[order] = pos - start
    return out


def _params_codes(files, modules, f, m, it, b, parsed, names) -> np.ndarray:
    """Code (into ``names``) of the parameter list of each gradient bucket, -1 if unknown.

    Vectorized per (file, module): the layout in force is found by searchsorted
    on the iterations its layouts start at."""
    out = np.full(len(f), -1, dtype=np.int32)
    pair = f.astype(np.int64) * (len(modules) + 1) + m
    for p in np.unique(pair):
        sel = np.flatnonzero(pair == p)
        fi, mi = divmod(int(p), len(modules) + 1)
        entries = parsed.get(files[fi], ({}, {}))[0].get(modules[mi], [])
        if not entries:
            continue
        froms = np.array([e[0] for e in entries], dtype=np.int64)
        width = max(len(e[1]) for e in entries)
        table = np.full((len(entries), width + 1), -1, dtype=np.int32)
        for li, (_, buckets) in enumerate(entries):
            for bi, bucket in enumerate(buckets):
                table[li, bi] = names.setdefault(",".join(bucket), len(names))
        li = np.searchsorted(froms, it[sel], side="right") - 1
        bb = np.minimum(b[sel], width)  # past the layout: the -1 column
        out[sel] = np.where(li >= 0, table[np.maximum(li, 0), bb], -1)
    return out


def assign_buckets(df: pd.DataFrame, ddp_meta_by_file: dict[str, list[dict]]) -> pd.DataFrame:
    """Fill ``bucket`` (Int64) and ``params`` (category) for DDP's ops."""
    if df.empty or "phase" not in df or not df["phase"].notna().any():
        return df
    detail_na = df["detail"].isna().to_numpy() if "detail" in df else np.ones(len(df), bool)
    grad_step = (_is(df["phase"], "backward") & detail_na) | (
        _is(df["detail"], "join_shadow_grad") if "detail" in df else False)
    is_grad = _is(df["op"], "all_reduce") & grad_step & df["module"].notna().to_numpy()
    del detail_na, grad_step
    idx = np.flatnonzero(is_grad)
    bucket_vals = np.zeros(len(df), dtype=np.int64)
    files, modules = df["file"].cat.categories, df["module"].cat.categories
    fcodes, mcodes = df["file"].cat.codes.to_numpy(), df["module"].cat.codes.to_numpy()
    if len(idx):
        key = (mcodes[idx].astype(np.int64) << 32) + df["iteration"].to_numpy()[idx]
        bucket_vals[idx] = _cumcount(fcodes[idx], key)
        del key
    df["bucket"] = pd.arrays.IntegerArray(bucket_vals, ~is_grad)
    parsed = {f: _layouts(m) for f, m in ddp_meta_by_file.items()}
    if not parsed:
        return df
    params = np.full(len(df), -1, dtype=np.int32)
    names: dict[str, int] = {}
    if len(idx):
        params[idx] = _params_codes(files, modules, fcodes[idx], mcodes[idx], df["iteration"].to_numpy()[idx],
                                    bucket_vals[idx], parsed, names)
    if "detail" in df:
        buf = np.flatnonzero(_is(df["detail"], "buffers") & (mcodes >= 0))
        pair = fcodes[buf].astype(np.int64) * (len(modules) + 1) + mcodes[buf]
        for p in np.unique(pair):
            fi, mi = divmod(int(p), len(modules) + 1)
            bufnames = parsed.get(files[fi], ({}, {}))[1].get(modules[mi])
            if bufnames:
                params[buf[pair == p]] = names.setdefault(",".join(bufnames), len(names))
    if names:
        df["params"] = pd.Categorical.from_codes(params, categories=list(names), validate=False)
    return df
