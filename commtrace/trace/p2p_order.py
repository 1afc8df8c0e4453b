"""Which send a recv received: each point-to-point op's ``pair_seq``, the number both sides of one message
agree on (the one rule; ``analysis.match`` pairs by it, the partitioned report and ``check`` through it).

The k-th send from s to d with tag t pairs with the k-th recv on d of a message from s with tag t: MPI's
and gloo's non-overtaking order (messages of one sender and tag are received in the order sent, by the
recvs in the order posted). A recv from any source counts by the rank it received from (its ``source``
line). So an op's ``pair_seq`` is its place (1, 2, ...) among its process's ops of one (group, direction,
peer, tag) in call order (raw call time, then seq).

The record's own ``seq`` cannot be that number: capture counts a send per peer over all tags, a recv per
peer over all tags, and a recv from any source per tag under the key of "recv from the rank whose number
is the tag" (docs/trace-format.md). It tells instead whether a counter's records are all in the trace: a
*counter* (process, group, direction, peer or, for a recv from any source, its tag) is whole when its
seqs are 1..n. An op whose (peer, tag) ops all lie in whole counters gets its exact place. Else (bounded
mode kept only the last ops; damaged records were skipped) an op keeps its seq when its counter holds one
tag and no recv from any source (exact when the two ranks used that one tag throughout, the rule before
pair_seq), and otherwise 0: not known, paired with nothing. A recv from any source whose sender is not
known (in flight, failed) is 0 too."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import schema
from .group_ranks import ranks_of

UNKNOWN = 0


def pair_seqs(proc: np.ndarray, group: np.ndarray, send: np.ndarray, peer: np.ndarray, tag: np.ndarray,
              counter_peer: np.ndarray, any_source: np.ndarray, t_call: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Per p2p op (every array one entry per op, any order): its pair_seq (the module's rule). ``proc``:
    its process (any int code), ``group``: its group (int code), ``send``: a send (else a recv), ``peer``:
    the other rank (a recv from any source: the rank it received from; < 0 not known), ``tag``,
    ``counter_peer``: the peer of capture's counter it was numbered by (a recv from any source: the rank
    its tag names), ``any_source``: a recv from any source, ``t_call``: raw call time, ``seq``: the record's."""
    n = len(seq)
    if n == 0:
        return np.zeros(0, np.int64)
    proc, group, peer, tag = (np.asarray(x, np.int64) for x in (proc, group, peer, tag))
    send, any_source = np.asarray(send, bool), np.asarray(any_source, bool)
    seq, t_call = np.asarray(seq, np.int64), np.asarray(t_call, np.int64)
    # capture's counters, and whether each is whole: its seqs are 1..n, each once
    counter = _codes(proc, group, send, counter_peer)
    k = int(counter.max()) + 1
    count = np.bincount(counter, minlength=k)
    top = np.zeros(k, np.int64)
    np.maximum.at(top, counter, seq)
    distinct = np.bincount(counter[np.unique(_codes(counter, seq), return_index=True)[1]], minlength=k)
    whole = (count == top) & (distinct == count)     # seqs (> 0: records.valid) 1..n
    # one tag and no recv from any source in a counter: its seq is the number the rule before pair_seq used
    tag_lo, tag_hi = np.full(k, np.iinfo(np.int64).max), np.full(k, np.iinfo(np.int64).min)
    np.minimum.at(tag_lo, counter, tag)
    np.maximum.at(tag_hi, counter, tag)
    has_any = np.bincount(counter, weights=any_source.astype(np.float64), minlength=k) > 0
    seq_ok = (tag_lo == tag_hi) & ~has_any
    # each op's place in call order among its (process, group, direction, peer, tag): exact when every op
    # of that key lies in a whole counter
    key = _codes(proc, group, send, peer, tag)
    order = np.lexsort((seq, t_call, key))
    ks = key[order]
    start = np.concatenate(([True], ks[1:] != ks[:-1]))
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    place = np.empty(n, np.int64)
    place[order] = np.arange(n) - first + 1
    exact = np.bincount(key, weights=(~whole[counter]).astype(np.float64)) == 0
    out = np.where(exact[key], place, np.where(seq_ok[counter], seq, UNKNOWN))
    out[peer < 0] = UNKNOWN
    return out


def _codes(*cols: np.ndarray) -> np.ndarray:
    """Dense int64 codes of the rows' value tuples (any order): the columns' offsets from their minimum
    packed into one int64 while their spans' product fits (made dense first where it would not), then
    one np.unique."""
    code, span = np.zeros(len(cols[0]), np.int64), 1
    for c in cols:
        c = np.asarray(c, np.int64)
        lo = int(c.min(initial=0))
        width = int(c.max(initial=0)) - lo + 1
        if width >= 1 << 31:                    # an odd huge value (a tag): its column made dense
            _, c = np.unique(c, return_inverse=True)
            c, lo, width = c.reshape(-1).astype(np.int64), 0, int(c.max(initial=0)) + 1
        if span * width >= 1 << 62:
            _, code = np.unique(code, return_inverse=True)
            code, span = code.reshape(-1).astype(np.int64), int(code.max(initial=0)) + 1
        code, span = code * width + (c - lo), span * width
    return np.unique(code, return_inverse=True)[1].reshape(-1).astype(np.int64)


@dataclass
class P2PColumns:
    """One process's records as pair_seqs reads them (p2p: a send or recv)."""
    p2p: np.ndarray
    send: np.ndarray
    peer: np.ndarray            # global rank of the other side; a recv from any source: its source line's; -1
    tag: np.ndarray
    counter_peer: np.ndarray    # the global rank of capture's counter's key: the peer; a recv from any source: its tag's
    any_source: np.ndarray


def p2p_columns(pt, rec: np.ndarray) -> P2PColumns:
    """``pt``'s records ``rec`` (valid ones: their sig ids are defined) as P2PColumns."""
    ids = np.array(sorted(pt.sigs), np.int64)
    sigs = [pt.sigs[i] for i in ids.tolist()]
    ops = [s.get("op") for s in sigs]
    is_p2p = np.array([o in schema.P2P_OPS for o in ops], bool)
    s_send = np.array([o == "send" for o in ops], bool)
    s_any = np.array([s.get("variant") == schema.RECV_ANY_SOURCE for s in sigs], bool)
    s_root = np.array([_int(s.get("root")) for s in sigs], np.int64)
    s_tag = np.array([_int(s.get("tag"), 0) for s in sigs], np.int64)
    si = np.searchsorted(ids, rec["sig"].astype(np.int64)) if len(ids) else np.zeros(len(rec), np.int64)
    si = np.minimum(si, max(len(ids) - 1, 0))
    if not len(ids):
        none = np.zeros(len(rec), bool)
        return P2PColumns(none, none, np.full(len(rec), -1, np.int64), np.zeros(len(rec), np.int64),
                          np.full(len(rec), -1, np.int64), none)
    p2p = is_p2p[si] & (ids[si] == rec["sig"])
    anys = s_any[si] & p2p
    peer = s_root[si].copy()
    tag = s_tag[si]
    counter_peer = peer.copy()
    if anys.any():
        # capture numbers a recv from any source under "recv from group rank <tag>": that rank's global one
        for gid in np.unique(rec["group"][anys]).tolist():
            ranks = ranks_of((pt.groups.get(gid) or {}).get("ranks"))
            sel = np.flatnonzero(anys & (rec["group"] == gid))
            t = tag[sel]
            counter_peer[sel] = t if ranks is None else [ranks[x] if 0 <= x < len(ranks) else x for x in t.tolist()]
        senders = any_source_senders(pt)
        t = rec["t_call"].astype(np.int64)
        peer[anys] = [-1 if senders.get(x) is None else senders[x] for x in t[anys].tolist()]
    return P2PColumns(p2p, s_send[si] & p2p, np.where(p2p, peer, -1), tag, counter_peer, anys)


def any_source_senders(pt) -> dict:
    """Raw call time -> the rank a recv from any source of process ``pt`` received from (None: not known),
    from its ``source`` lines; the last line of a call time wins, as the frame's join (reader.build_frame)."""
    senders: dict = {}
    for line in pt.sources:
        t = schema.int_or_none(line.get("t_call"))
        if t is not None:
            senders[t] = schema.int_or_none(line.get("src"))
    return senders


def process_pair_seqs(pt, rec: np.ndarray, c: P2PColumns | None = None) -> np.ndarray:
    """Per record of ``rec`` (all of one process's records the trace keeps): its pair_seq, 0 where not a
    send/recv (``c``: their p2p_columns, if known)."""
    out = np.zeros(len(rec), np.int64)
    if c is None and not any(s.get("op") in schema.P2P_OPS for s in pt.sigs.values()):
        return out                  # collectives only (the common case): no pass over the records
    c = p2p_columns(pt, rec) if c is None else c
    at = np.flatnonzero(c.p2p)
    if len(at):
        out[at] = pair_seqs(np.zeros(len(at), np.int64), rec["group"][at], c.send[at], c.peer[at], c.tag[at],
                            c.counter_peer[at], c.any_source[at], rec["t_call"][at], rec["seq"][at])
    return out


def pair_seq_runs(pt, rec: np.ndarray) -> tuple[np.ndarray, PairSeqRuns]:
    """(per record of ``rec``, all of one process's records the trace keeps: its pair_seq; its p2p
    records' PairSeqRuns)."""
    c = p2p_columns(pt, rec)
    pair = process_pair_seqs(pt, rec, c)
    return pair, PairSeqRuns.of(rec[c.p2p], pair[c.p2p])


def chunk_seqs(seq: np.ndarray, pair: np.ndarray) -> np.ndarray:
    """Per record (its ``seq`` and pair_seq) the seq a chunk of the run is cut by: a p2p op's pair_seq (both
    sides of a message in one chunk), else (collectives; pair_seq not known) its seq."""
    return np.where(pair != UNKNOWN, pair, seq.astype(np.int64))


@dataclass
class PairSeqRuns:
    """One process's p2p records' pair_seqs, for the tasks that read a slice of its records: keyed by
    (group id, sig id, seq) (one op), as runs over which pair_seq - seq is constant (one per counter
    in the common case: one tag, no recv from any source)."""
    starts: np.ndarray          # sorted keys (group index * sigs + sig index) << 32 | seq where a run starts
    deltas: np.ndarray          # pair_seq - seq from there on; _NOT_KNOWN: pair_seq 0
    groups: np.ndarray          # group ids, sorted (their index: the key's)
    sigs: np.ndarray            # sig ids, sorted

    @classmethod
    def of(cls, rec: np.ndarray, pair: np.ndarray) -> PairSeqRuns:
        """From the records ``rec`` of one process and their pair_seqs (0: not p2p or not known)."""
        groups = np.unique(rec["group"].astype(np.int64))
        sigs = np.unique(rec["sig"].astype(np.int64))
        runs = cls(np.empty(0, np.int64), np.empty(0, np.int64), groups, sigs)
        key = runs._keys(rec)
        delta = np.where(pair != UNKNOWN, pair - rec["seq"].astype(np.int64), _NOT_KNOWN)
        order = np.argsort(key, kind="stable")
        key, delta = key[order], delta[order]
        new = np.ones(len(key), bool)
        new[1:] = (delta[1:] != delta[:-1]) | ((key[1:] >> 32) != (key[:-1] >> 32))
        runs.starts, runs.deltas = key[new], delta[new]
        return runs

    def _keys(self, rec: np.ndarray) -> np.ndarray:
        gi = np.minimum(np.searchsorted(self.groups, rec["group"].astype(np.int64)), max(len(self.groups) - 1, 0))
        si = np.minimum(np.searchsorted(self.sigs, rec["sig"].astype(np.int64)), max(len(self.sigs) - 1, 0))
        return ((gi * max(len(self.sigs), 1) + si) << 32) | rec["seq"].astype(np.int64)

    def pair_seqs(self, rec: np.ndarray) -> np.ndarray:
        """Per record of ``rec`` (records of this process, of any slice): its pair_seq (0: not a p2p op of the
        table, or not known)."""
        if not len(self.starts) or not len(rec):
            return np.zeros(len(rec), np.int64)
        key = self._keys(rec)
        at = np.maximum(np.searchsorted(self.starts, key, side="right") - 1, 0)
        ok = (self.starts[at] >> 32) == (key >> 32)
        ok &= np.isin(rec["group"].astype(np.int64), self.groups) & np.isin(rec["sig"].astype(np.int64), self.sigs)
        d = self.deltas[at]
        return np.where(ok & (d != _NOT_KNOWN), rec["seq"].astype(np.int64) + d, UNKNOWN)


_NOT_KNOWN = np.iinfo(np.int64).min


def _int(v, default: int = -1) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default
