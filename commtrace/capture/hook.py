"""Swap a traced wrapper (native_wrapper.make_traced) in wherever torch.distributed registers a group.

The torch private APIs of group creation are used here only: ``_register_pg_in_world`` (where every
group is registered), and the functions that hand a new group back to their caller. Torch then keeps
the wrapper in all its bookkeeping, so ``get_backend()`` and group lookups work unchanged.
"""
from __future__ import annotations

import contextlib
import functools
import secrets
import threading
import weakref
from datetime import timedelta

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from .. import torch_compat
from . import clock, native_wrapper
from .recorder import Recorder
from .scopes import drop_own_frame

_WORLD_KEY = "commtrace/world_id"
# Backends whose ranks are simulated inside one process, left untraced: a trace's rank is a process,
# and they find the group they are handed in torch's registries by identity, where the wrapper
# stands instead (its collectives failed): torch's multi-threaded test backend (MultiThreadedTestCase;
# "KeyError: ThreadedPG ..."), and c10d's "fake" backend, on which LocalTensorMode plays every rank
# (torch's DTensor/TP tests "WithLocalTensor": KeyError on the group from get_process_group_ranks).
SIMULATED_BACKENDS = frozenset({"threaded", "fake"})
_tls = threading.local()


class Installer:
    def __init__(self, recorder: Recorder):
        self.rec = recorder
        # id(inner) -> wrapper. Weak: once torch forgets a group (destroy_process_group)
        # it must be freed then, as without tracing; a group kept alive until
        # interpreter teardown can abort the process (gloo threads destroyed joinable).
        self.traced: "weakref.WeakValueDictionary[int, dist.ProcessGroup]" = weakref.WeakValueDictionary()
        self.traced_types = native_wrapper.traced_types()
        self.world_index = -1
        self.world_id = None
        self.originals: dict[str, object] = {}
        self.untraced_backends: set[str] = set()   # simulated backends the program made groups of

    def as_traced(self, obj):
        """``obj`` (a group, or a tuple holding one) with the wrapper in place of a group. Without
        the _register_pg_in_world hook (torch < 2.13) the helper registers the real group
        itself: a registered group is wrapped here and the wrapper swapped into the registries."""
        if isinstance(obj, tuple):
            return tuple(self.as_traced(x) for x in obj)
        if not isinstance(obj, dist.ProcessGroup) or isinstance(obj, self.traced_types):
            return obj
        traced = self.traced.get(id(obj))
        if traced is None and "_register_pg_in_world" not in self.originals and obj in c10d._world.pg_map:
            return self._adopt(obj)
        return obj if traced is None else traced

    def wrap(self, pg, backend_name: str, store, group_name: str, rank_mapping, backend_config=None):
        if isinstance(pg, self.traced_types):
            return pg
        if str(backend_name) in SIMULATED_BACKENDS:
            if str(backend_name) not in self.untraced_backends:   # the report says why it has no ops
                self.untraced_backends.add(str(backend_name))
                self.rec.add_process_info(untraced_backends=sorted(self.untraced_backends))
            return pg
        store = torch_compat.real_store(store)
        backend_name = _backend_label(backend_name, backend_config)
        if c10d._world.default_pg is None:
            self._new_world(pg, backend_name, store)
        if rank_mapping:
            ranks = [g for g, _ in sorted(rank_mapping.items(), key=lambda kv: kv[1])]
        else:
            ranks = list(_tls.__dict__.get("ranks") or range(pg.size()))
        kind = native_wrapper.kind_for(pg)
        try:
            desc = pg.group_desc
        except Exception:
            desc = None
        gid = self.rec.add_group({
            "world": self.world_index, "world_id": self.world_id, "name": str(group_name),
            "desc": desc, "backend": str(backend_name),
            "size": pg.size(), "rank": pg.rank(), "ranks": ranks, "wrapper": kind,
        })
        traced = native_wrapper.make_traced(pg, self.rec, gid, ranks, kind)
        self.traced[id(pg)] = traced
        return traced

    def _new_world(self, pg, backend_name, store) -> None:
        self.world_index += 1
        self.world_id = _world_id(pg, store, self.rec.run_id, self.world_index)
        self.rec.add_world({"world_id": self.world_id, "rank": pg.rank(),
                            "world_size": pg.size(), "backend": str(backend_name)})
        clock.track_world(self.rec, store, pg.rank(), pg.size(), self.world_id, str(backend_name))

    def install(self) -> None:
        if self.originals:
            return
        reg = getattr(c10d, "_register_pg_in_world", None)
        helper = c10d._new_process_group_helper

        def set_ranks(args):
            group_size, _, ranks = args[:3]
            _tls.ranks = list(ranks) or list(range(group_size))

        patches = {"_new_process_group_helper": self._returning_traced(helper, set_ranks)}
        if reg is not None:
            @functools.wraps(reg)
            def register(pg, backend_name, store, group_name, backend_config, rank_mapping=None, *a, **kw):
                traced = self.wrap(pg, backend_name, store, group_name, rank_mapping, backend_config)
                try:
                    return reg(traced, backend_name, store, group_name, backend_config, rank_mapping, *a, **kw)
                except BaseException as e:
                    drop_own_frame(e)
                    raise
            patches["_register_pg_in_world"] = register
        # Functions that return a group they made (or pass it on before registering it).
        for name in ("split_group", "_new_group_with_tag", "_finalize_shrunk_group"):
            fn = getattr(c10d, name, None)
            if fn is not None:
                patches[name] = self._returning_traced(fn)
        upd = c10d._update_default_pg

        @functools.wraps(upd)
        def update_default_pg(pg):
            try:
                return upd(self.as_traced(pg))
            except BaseException as e:
                drop_own_frame(e)
                raise
        patches["_update_default_pg"] = update_default_pg
        for name, fn in patches.items():
            self.originals[name] = getattr(c10d, name)
            setattr(c10d, name, fn)
        # torch.distributed re-exports it.
        if "split_group" in patches and getattr(dist, "split_group", None) is self.originals["split_group"]:
            dist.split_group = patches["split_group"]

    def _adopt(self, pg):
        """Wrap registered group ``pg`` and swap the wrapper into torch's registries."""
        if isinstance(pg, self.traced_types) or id(pg) in self.traced:
            return pg
        w = c10d._world
        name = w.pg_names.get(pg)
        traced = self.wrap(pg, *_registered_backend(pg), name, w.pg_group_ranks.get(pg))
        if traced is not pg:
            _swap_in_registries(pg, traced, name)
        return traced

    def adopt_existing(self) -> int:
        """Wrap every existing group (``start()`` after ``init_process_group``), the default
        first. Collective over each world (world id, clock offsets). Returns the groups wrapped."""
        w = c10d._world
        default = w.default_pg
        if default is None:
            return 0
        if self.world_id is None and not isinstance(default, self.traced_types):
            self._new_world(default, *_registered_backend(default))
        n = 0
        for pg in sorted(w.pg_map, key=lambda pg: pg is not default):  # the default group first (stable)
            traced = self._adopt(pg)
            if traced is not pg:
                if w.default_pg is pg:
                    c10d._update_default_pg(traced)
                n += 1
        return n

    def _returning_traced(self, fn, before=None):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            if before is not None:
                before(a)
            try:
                return self.as_traced(fn(*a, **kw))
            except BaseException as e:
                drop_own_frame(e)
                raise
            finally:
                _tls.ranks = None
        return wrapper

    def uninstall(self) -> None:
        for name, fn in self.originals.items():
            setattr(c10d, name, fn)
            if name == "split_group" and getattr(dist, name, None) is not None:
                dist.split_group = fn
        self.originals.clear()


# torch's per-group registries (torch < 2.13 fills them inline; see as_traced).
_KEYED_BY_GROUP = ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "pg_to_tag", "pg_coalesce_state")


def _swap_in_registries(inner, traced, group_name) -> None:
    w = c10d._world
    for attr in _KEYED_BY_GROUP:
        d = getattr(w, attr, None)
        if isinstance(d, dict) and inner in d:
            items = [(traced if k is inner else k, v) for k, v in d.items()]  # keep the order
            d.clear()
            d.update(items)
    for pgs in getattr(w, "tags_to_pg", {}).values():
        pgs[:] = [traced if p is inner else p for p in pgs]
    if group_name is not None:  # the name -> group registry of functional collectives
        with contextlib.suppress(Exception):
            c10d._unregister_process_group(group_name)
        c10d._register_process_group(group_name, traced)


def _registered_backend(pg) -> tuple:
    """(backend label, store) of a group in torch's registries."""
    w = c10d._world
    backend_name, store = w.pg_map[pg]
    return _backend_label(backend_name, getattr(w, "pg_backend_config", {}).get(pg)), store


def _backend_label(backend_name, backend_config) -> str:
    """The backend a group's trace lines name. A group made without one
    (``init_process_group()``, ``init_device_mesh``) is "undefined" to torch, which runs it
    on its devices' defaults (``backend_config``, e.g. "cpu:gloo" or "cpu:gloo,cuda:nccl"):
    their one backend ("gloo"), or that config when the devices' backends differ."""
    name = str(backend_name)
    if name != dist.Backend.UNDEFINED or not backend_config:
        return name
    config = str(backend_config)
    per_device = {b for part in config.split(",") for _, sep, b in [part.partition(":")] if sep and b}
    return per_device.pop() if len(per_device) == 1 else config


def _world_id(pg, store, run_id: str, index: int) -> str:
    """An id every rank of a new world agrees on: rank 0 publishes a random one in the store.
    Without a store (mpi4py), every rank of the MPI job makes its worlds in the same order."""
    if store is not None:
        with contextlib.suppress(Exception):
            # A store outlives worlds (groups made again on it, torchrun's restarts), and an
            # earlier world's id left there was read as this one's: each world has its own key,
            # numbered by the worlds this rank made on the store, as the clock's keys are.
            key = f"{_WORLD_KEY}/{store.add(f'{_WORLD_KEY}/joins/{pg.rank()}', 1)}"
            if pg.rank() == 0:
                wid = secrets.token_hex(8)
                store.set(key, wid)
                return wid
            store.wait([key], timedelta(seconds=60))
            return store.get(key).decode()
    return f"{run_id}/world{index}/size{pg.size()}"
