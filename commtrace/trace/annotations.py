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
    small = group.astype(np.int16 if group.max(initial=0) < 2**15 else np.int64)
    order = np.argsort(small, kind="stable")
    sk = (group.astype(np.int64)[order] << 40) + key[order]
    if not (sk[1:] >= sk[:-1]).all():  # a key recurs after another: sort by it
        order2 = np.argsort(sk, kind="stable")
        order, sk = order[order2], sk[order2]
    new = np.r_[True, sk[1:] != sk[:-1]]
    pos = np.arange(len(sk))
    start = np.maximum.accumulate(np.where(new, pos, 0))
    out = np.empty(len(sk), dtype=np.int64)
    out[order] = pos - start
    return out


def assign_buckets(df: pd.DataFrame, ddp_meta_by_file: dict[str, list[dict]]) -> pd.DataFrame:
    """Fill ``bucket`` (Int64) and ``params`` (category) for DDP's ops."""
    if df.empty or "phase" not in df or not df["phase"].notna().any():
        return df
    detail_na = df["detail"].isna().to_numpy() if "detail" in df else np.ones(len(df), bool)
    grad_step = (_is(df["phase"], "backward") & detail_na) | (
        _is(df["detail"], "join_shadow_grad") if "detail" in df else False)
    is_grad = _is(df["op"], "all_reduce") & grad_step & df["module"].notna().to_numpy()
    idx = np.flatnonzero(is_grad)
    bucket_vals = np.zeros(len(df), dtype=np.int64)
    if len(idx):
        f = df["file"].cat.codes.to_numpy()[idx].astype(np.int64)
        m = df["module"].cat.codes.to_numpy()[idx].astype(np.int64)
        it = df["iteration"].to_numpy()[idx].astype(np.int64)
        bucket_vals[idx] = _cumcount(f, m * (int(it.max()) + 1) + it)
    df["bucket"] = pd.arrays.IntegerArray(bucket_vals, ~is_grad)
    parsed = {f: _layouts(m) for f, m in ddp_meta_by_file.items()}
    if not parsed:
        return df
    # params: computed per distinct (file, module, iteration, bucket), not per row.
    params = np.full(len(df), -1, dtype=np.int64)
    names: dict[str, int] = {}
    files, modules = df["file"].cat.categories, df["module"].cat.categories
    if len(idx):
        combo = pd.DataFrame({"f": df["file"].cat.codes.to_numpy()[idx], "m": df["module"].cat.codes.to_numpy()[idx],
                              "i": df["iteration"].to_numpy()[idx], "b": bucket_vals[idx]})
        codes, uniq = pd.factorize(pd.MultiIndex.from_frame(combo))
        per_combo = np.full(len(uniq), -1, dtype=np.int64)
        for k, (f, m, it, b) in enumerate(uniq):
            layouts, _ = parsed.get(files[f], ({}, {}))
            buckets = _layout_at(layouts.get(modules[m], []), int(it))
            if buckets is not None and b < len(buckets):
                per_combo[k] = names.setdefault(",".join(buckets[b]), len(names))
        params[idx] = per_combo[codes]
    if "detail" in df:
        buf = np.flatnonzero(_is(df["detail"], "buffers") & df["module"].notna().to_numpy())
        if len(buf):
            fm = pd.DataFrame({"f": df["file"].cat.codes.to_numpy()[buf], "m": df["module"].cat.codes.to_numpy()[buf]})
            codes, uniq = pd.factorize(pd.MultiIndex.from_frame(fm))
            per_combo = np.full(len(uniq), -1, dtype=np.int64)
            for k, (f, m) in enumerate(uniq):
                bufnames = parsed.get(files[f], ({}, {}))[1].get(modules[m])
                if bufnames:
                    per_combo[k] = names.setdefault(",".join(bufnames), len(names))
            params[buf] = per_combo[codes]
    if names:
        df["params"] = pd.Categorical.from_codes(params, categories=list(names))
    return df
