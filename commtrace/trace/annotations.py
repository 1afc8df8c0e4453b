"""Derive ``bucket`` and ``params`` from DDP's bucket layout.

DDP launches its gradient all_reduces (and a joined rank its ``join_shadow_grad``
shadows) in bucket order: within one (process, module, iteration) the k-th is bucket k,
unless a comm hook issued it (PowerSGD: several per bucket) and its sig names the bucket.
Buffer broadcasts (detail ``buffers``) get the module's buffer names.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import schema


def ddp_layouts(meta: list[dict]) -> tuple[dict, dict]:
    """(module -> sorted [(from_iteration, buckets)], module -> buffer names) of one process's DDP meta lines."""
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


def _is(col: pd.Series, value: str) -> np.ndarray:
    """Rows of a categorical column equal to ``value`` (by code)."""
    cats = col.cat.categories
    if value not in cats:
        return np.zeros(len(col), dtype=bool)
    return col.cat.codes.to_numpy() == cats.get_loc(value)


# Gradients are floating point (or complex): an integer all_reduce in DDP's backward
# is its map of used parameters (find_unused_parameters, static_graph), no bucket.
_INTEGER_DTYPES = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"})


def is_gradient_allreduce(op, phase, detail, module, dtype=None, issued_async=True) -> bool:
    """DDP's bucketed gradient all_reduce (or a joined rank's shadow of it). DDP's reducer never
    waits where it launches a bucket: a blocking all_reduce in backward (``issued_async`` False:
    SyncBatchNorm's, a model-parallel region's input gradient) is the program's, no bucket."""
    if op != "all_reduce" or module is None or dtype in _INTEGER_DTYPES:
        return False
    return (phase == "backward" and detail is None and issued_async is not False) or detail == "join_shadow_grad"


def sig_is_gradient_allreduce(s: dict) -> bool:
    """``is_gradient_allreduce`` of a sig line. A comm hook's op (``bucket`` set) is the bucket's;
    otherwise DDP's reducer issues its buckets from C++: an all_reduce Python code called outside a
    comm hook (``python_call``: a module hook's or a custom backward's ``dist.all_reduce(...,
    async_op=True)``) is the program's own, no bucket (traces without the field: as before)."""
    hooked = s.get("bucket") is not None
    if s.get("python_call") and not hooked and s.get("detail") is None:
        return False
    return is_gradient_allreduce(s.get("op"), s.get("phase"), s.get("detail"), s.get("module"), s.get("dtype"),
                                 True if hooked else s.get("async"))


def nth_in_step(key: np.ndarray) -> np.ndarray:
    """Per gradient all_reduce (call order) how many earlier ones share its (module, iteration)
    key: its bucket (int32). Keys normally only grow (one pass); else a stable sort."""
    n = len(key)
    order = None
    if n > 1 and not (key[1:] >= key[:-1]).all():
        order = np.argsort(key, kind="stable")
        key = key[order]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    pos = np.arange(n, dtype=np.int32)
    pos -= np.flatnonzero(new).astype(np.int32)[np.cumsum(new, dtype=np.int32) - 1]
    if order is None:
        return pos
    out = np.empty(n, dtype=np.int32)
    out[order] = pos
    return out


def process_buckets(t_call: np.ndarray, sig: np.ndarray, iteration: np.ndarray, sigs: dict) -> np.ndarray:
    """Bucket number per record of one process (-1: not a gradient all_reduce); ``sigs``: its sigs by id."""
    out = np.full(len(sig), -1, dtype=np.int32)
    if not sigs or not len(sig):
        return out
    grad = np.zeros(max(sigs) + 1, dtype=bool)
    module = np.zeros(len(grad), dtype=np.int64)
    named = np.full(len(grad), -1, dtype=np.int32)  # the bucket a comm hook's op was issued for
    names: dict = {}
    for k, s in sigs.items():
        b = s.get("bucket")   # the bucket a comm hook (capture.comm_hooks) issued the op for
        if sig_is_gradient_allreduce(s):
            if type(b) is int and 0 <= b < 2**31:
                named[k] = b
            else:
                grad[k] = True
                module[k] = names.setdefault(str(s["module"]), len(names))
    if (named >= 0).any():
        out = named[sig]
    idx = np.flatnonzero(grad[sig])
    if not len(idx):
        return out
    t = t_call[idx]
    if not (t[1:] >= t[:-1]).all():
        idx = idx[np.argsort(t, kind="stable")]
    out[idx] = nth_in_step((module[sig[idx]] << 32) + iteration[idx].astype(np.int64))  # (module, iteration)
    return out


@dataclass(frozen=True)
class BucketRule:
    """A run's rule for bucket / params (``bucket_rule``), the same for the frame and the analysis cells."""
    phased: bool = False        # a sig names a phase: gradient all_reduces get their bucket number (process_buckets)
    layouts: bool = False       # ... and a process has DDP layouts: params from them (layout_params), else the sig's


def bucket_rule(procs: list) -> BucketRule:
    """The BucketRule of a run's processes (``ProcessTrace``: their sig and DDP meta lines, not their records, so
    neither the ops read nor a window change it)."""
    phased = any(s.get("phase") is not None for p in procs for s in p.sigs.values())
    parsed = [ddp_layouts(p.ddp) for p in procs if p.ddp]
    layouts = any(any(b for _, b in v) for buckets, _ in parsed for v in buckets.values()) or \
        any(any(buffers.values()) for _, buffers in parsed)
    return BucketRule(phased, phased and layouts)


def layout_table(entries: list, code) -> tuple[np.ndarray, np.ndarray]:
    """One module's DDP layouts (``ddp_layouts``' [(from_iteration, buckets)]) as (the iterations they start at,
    per layout and bucket the ``code`` (parameter list text -> int) of its parameters; -1 past its buckets)."""
    width = max(len(e[1]) for e in entries)
    table = np.full((len(entries), width + 1), -1, np.int64)
    for li, (_, buckets) in enumerate(entries):
        table[li, :len(buckets)] = [code(",".join(b)) for b in buckets]
    return np.array([e[0] for e in entries], np.int64), table


def layout_params(table: tuple[np.ndarray, np.ndarray], iteration: np.ndarray, bucket: np.ndarray) -> np.ndarray:
    """Per gradient all_reduce of one module (its ``iteration``, its ``bucket``: process_buckets) the code of its
    parameters in ``layout_table``: the bucket of the layout in force at its iteration (the last to start at or
    before it); -1 when none (before the first layout, a bucket past the layout's)."""
    froms, t = table
    li = np.searchsorted(froms, iteration, side="right") - 1
    col = np.where((bucket >= 0) & (bucket < t.shape[1]), bucket, t.shape[1] - 1)
    return np.where(li >= 0, t[np.maximum(li, 0), col], -1)


def buffers_params(buffers: dict, module, detail) -> str | None:
    """The params text of an op of ``module`` and ``detail``: for DDP's buffer broadcast (detail ``buffers``) its
    module's buffer names (``ddp_layouts``' second table), else None."""
    names = buffers.get(module) if module is not None and detail == "buffers" else None
    return ",".join(names) if names else None


def assign_buckets(df: pd.DataFrame, ddp_meta_by_file: dict[str, list[dict]], bucket_vals: np.ndarray,
                   rule: BucketRule) -> pd.DataFrame:
    """Fill ``bucket`` (Int32) and ``params`` (category) for DDP's ops as ``rule`` says (the run's bucket_rule).
    ``bucket_vals``: per row its ``process_buckets`` number (-1: other ops), reused for the column (-1 becomes 0
    under NA)."""
    if df.empty or not rule.phased:
        return df
    is_grad = bucket_vals >= 0
    idx = np.flatnonzero(is_grad)
    files, modules = df["file"].cat.categories, df["module"].cat.categories
    fcodes, mcodes = df["file"].cat.codes.to_numpy(), df["module"].cat.codes.to_numpy()
    df["bucket"] = pd.arrays.IntegerArray(np.maximum(bucket_vals, 0, out=bucket_vals), ~is_grad)
    del is_grad
    if not rule.layouts:
        return df
    parsed = {f: ddp_layouts(m) for f, m in ddp_meta_by_file.items()}
    params = np.full(len(df), -1, dtype=np.int32)
    names: dict[str, int] = {}
    code = lambda text: names.setdefault(text, len(names))     # noqa: E731
    if len(idx):        # per (file, module) of the gradient all_reduces: its layouts
        pair = fcodes[idx].astype(np.int64) * (len(modules) + 1) + mcodes[idx]
        it = df["iteration"].to_numpy()[idx]
        for p in np.unique(pair).tolist():
            fi, mi = divmod(p, len(modules) + 1)
            entries = parsed.get(files[fi], ({}, {}))[0].get(modules[mi]) if mi < len(modules) else None
            if entries:
                sel = np.flatnonzero(pair == p)
                params[idx[sel]] = layout_params(layout_table(entries, code), it[sel], bucket_vals[idx[sel]])
    if "detail" in df:
        buf = np.flatnonzero(_is(df["detail"], "buffers") & (mcodes >= 0))
        pair = fcodes[buf].astype(np.int64) * (len(modules) + 1) + mcodes[buf]
        for p in np.unique(pair).tolist():
            fi, mi = divmod(p, len(modules) + 1)
            text = buffers_params(parsed.get(files[fi], ({}, {}))[1], modules[mi], "buffers")
            if text is not None:
                params[buf[pair == p]] = code(text)
    df["params"] = pd.Categorical.from_codes(params, categories=list(names), validate=False)
    return df
