"""Runs under mpirun: the mpi backend's C++ fast path against the Python path and gloo.

    worker_native.py ops       every fast-path dtype x ReduceOp, the delegated cases,
                               every other op through the native group
    worker_native.py ddp       one DDP training on the native group, the Python group, gloo
    worker_native.py fallback  (COMMTRACE_NATIVE=0) the Python group is used
    worker_native.py ops ddp   both, in that order, in one launch (one summary line each)

Groups: G = gloo (default group, env:// rendezvous over MPI), N = new_group("mpi")
(the native group), P = new_group("mpi") created with COMMTRACE_NATIVE=0 (the
Python MPIProcessGroup, known to c10d, so torch.distributed's functions take it).
Each check runs the same call on N, P and, where gloo has the kernel, G and
compares bit for bit (small-integer data: exact in every dtype and order).
Exit 1 with a report on any mismatch.
"""
from __future__ import annotations

import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

from commtrace import torch_compat

import commtrace.mpi
from commtrace import mpienv
from commtrace.mpi.backend import MPIProcessGroup

MODES = sys.argv[1:]
if not MODES or not set(MODES) <= {"ops", "ddp", "fallback"} or ("fallback" in MODES and len(MODES) > 1):
    raise SystemExit(f"modes: ops, ddp, ops ddp or fallback, not {MODES}")
R = dist.ReduceOp
comm = mpienv.world()
rank, size = comm.Get_rank(), comm.Get_size()
# MASTER_ADDR, MASTER_PORT: the test's (conftest.mpirun)
assert commtrace.mpi.install() == "mpi4py"
dist.init_process_group("gloo", rank=rank, world_size=size)
G = dist.group.WORLD
N = dist.new_group(backend="mpi")
status = commtrace.mpi.fastpath_status()
failures: list[str] = []
checks = 0


def fail(name, msg):
    failures.append(f"[rank{rank}] {name}: {msg}")


def summarize(mode, summary) -> bool:
    """Prints ``mode``'s summary line (rank 0) and starts the next mode's count; True if no rank failed."""
    global checks
    all_failures = comm.allgather(failures)
    if rank == 0:
        flat = [f for fs in all_failures for f in fs]
        print(f"native {mode}: {summary}, {checks} checks on {size} ranks, {len(flat)} failures", flush=True)
        for f in flat[:60]:
            print(f)
    failures.clear()
    checks = 0
    return not any(all_failures)


def finish(ok: bool):
    dist.destroy_process_group()
    time.sleep(0.05)   # torch 2.13 exit race with gloo's worker thread (see worker_ops.py)
    sys.exit(0 if ok else 1)


if MODES == ["fallback"]:
    # COMMTRACE_NATIVE=0: the factory hands c10d the Python group, and it works.
    checks += 3
    if not isinstance(N, MPIProcessGroup):
        fail("group type", f"{type(N)} with COMMTRACE_NATIVE=0")
    if status != "python: disabled by COMMTRACE_NATIVE=0":
        fail("status", status)
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, group=N)
    if not torch.equal(t, torch.full((3,), float(size * (size + 1) // 2))):
        fail("all_reduce", t)
    finish(summarize("fallback", status))

checks += 4
if type(N).__name__ != "NativeMPIProcessGroup" or status != "native":
    print(f"[rank{rank}] expected the native group, got {type(N)} ({status})", flush=True)
    sys.exit(1)
if not isinstance(N.inner, MPIProcessGroup) or N.comm is not N.inner.comm:
    fail("inner", f"{N.inner!r} / {N.comm!r}")
if dist.get_backend(N) != "mpi" or N.name() != "mpi":
    fail("backend name", f"{dist.get_backend(N)} / {N.name()}")
if not N.group_name or N.group_name != N.inner.group_name:
    fail("group name", f"{N.group_name!r} vs inner {N.inner.group_name!r}")

os.environ["COMMTRACE_NATIVE"] = "0"
P = dist.new_group(backend="mpi")
os.environ["COMMTRACE_NATIVE"] = "1"
assert isinstance(P, MPIProcessGroup), type(P)

INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
        torch.uint64]
FLOATS = [torch.float32, torch.float64]
OPS = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR, R.AVG]


def fast_expected(dt, op) -> bool:
    """Written from docs/mpi-backend.md, independently of native_mpi.cpp."""
    if dt in INTS or dt == torch.bool:
        return op != R.AVG
    if dt in FLOATS:
        return op in (R.SUM, R.PRODUCT, R.MIN, R.MAX)
    if dt in (torch.complex64, torch.complex128):
        return op == R.SUM
    return False


def data(dt, shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, shape, generator=g)
    if dt == torch.bool:
        return (x % 2).bool()
    if dt.is_complex:
        return torch.complex(x.float(), (x + 1).float()).to(dt)
    if dt.is_floating_point and dt.itemsize == 1:
        return x.float().to(dt)
    return x.to(dt)


def outcome(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- compared across groups
        return e


def same(a, b):
    if isinstance(a, Exception) or isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.element_size() == 1 and a.dtype.is_floating_point:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return torch.equal(a, b)


def compare(name, fn, gloo=True):
    """fn(group) -> result; the native group must give what the Python group
    gives (tensors or the same exception), and what gloo gives where gloo
    has the kernel (a gloo exception means no reference)."""
    global checks
    checks += 1
    try:
        n, p = outcome(lambda: fn(N)), outcome(lambda: fn(P))
        if not same(n, p):
            fail(name, f"native {n!r} vs python {p!r}")
        if gloo:
            g = outcome(lambda: fn(G))
            if not isinstance(g, Exception) and not same(n, g):
                fail(name, f"native {n!r} vs gloo {g!r}")
    except Exception:  # noqa: BLE001
        fail(name, traceback.format_exc())


def sync_opts(cls, **kw):
    return torch_compat.make_options(cls, async_op=False, **kw)


def finished(work):
    work.wait()
    return work


def path_taken(work):
    return "fast" if type(work).__name__ == "DoneWork" else "python"


def check_path(name, work, fast, options_type):
    """Before torch 2.8 some Options types carry no asyncOp: such a call cannot say it
    blocks, counts as asynchronous, and the fast path (blocking calls only) is not taken."""
    global checks
    checks += 1
    fast = fast and torch_compat.has_async_op(options_type)
    if path_taken(work) != ("fast" if fast else "python"):
        fail(name, f"took the {path_taken(work)} path, expected {'fast' if fast else 'python'}")


passed = True
if "ops" in MODES:
    # ---- all_reduce: every dtype x op, public API; then the path the direct call took
    for dt in INTS + FLOATS + [torch.bool, torch.complex64, torch.complex128, torch.float16, torch.bfloat16]:
        for op in OPS:
            name = f"all_reduce {dt} {op}"

            def ar(g, dt=dt, op=op):
                x = data(dt, (5,), rank + 3)
                dist.all_reduce(x, op=op, group=g)
                return x
            compare(name, ar, gloo=dt not in (torch.uint16, torch.uint32, torch.uint64))
            x = data(dt, (5,), rank + 3)
            # each waited for before the next: asynchronous where the options cannot say
            # blocking (see check_path), and two collectives must not run at once
            w = outcome(lambda: finished(N.allreduce([x], sync_opts(dist.AllreduceOptions, reduceOp=op))))
            y = data(dt, (5,), rank + 3)
            ref = outcome(lambda: finished(P.allreduce([y], sync_opts(dist.AllreduceOptions, reduceOp=op))))
            checks += 1
            if isinstance(w, Exception) or isinstance(ref, Exception):
                if not same(w, ref):
                    fail(name + " direct", f"native {w!r} vs python {ref!r}")
                continue
            if not same(x, y):
                fail(name + " direct", f"native {x} vs python {y}")
            check_path(name, w, fast_expected(dt, op), dist.AllreduceOptions)

    # ---- broadcast: every dtype moves bits on the fast path; both roots
    for dt in INTS + FLOATS + [torch.bool, torch.complex64, torch.float16, torch.bfloat16, torch.float8_e4m3fn]:
        for root in range(size):
            def bc(g, dt=dt, root=root):
                x = data(dt, (6,), rank * 7 + 1)
                dist.broadcast(x, root, group=g)
                return x
            compare(f"broadcast {dt} root {root}", bc, gloo=dt in FLOATS + [torch.int64, torch.int32])
            check_path(f"broadcast {dt} root {root}",
                       N.broadcast([data(dt, (6,), 1)], sync_opts(dist.BroadcastOptions, rootRank=root)), True,
                       dist.BroadcastOptions)

    # ---- delegated cases give the Python group's results (or its errors)
    def noncontig(g):
        x = data(torch.float32, (4, 6), rank).t()
        dist.all_reduce(x, group=g)
        return x
    compare("all_reduce non-contiguous", noncontig, gloo=False)
    compare("all_reduce conjugate view (direct)",
            lambda g: g.allreduce([data(torch.complex64, (3,), rank).conj()], sync_opts(dist.AllreduceOptions)),
            gloo=False)
    compare("broadcast root out of range (direct)", lambda g: g.broadcast(
        [torch.ones(2)], sync_opts(dist.BroadcastOptions, rootRank=size + 1)), gloo=False)
    compare("all_reduce PREMUL_SUM", lambda g: g.allreduce(
        [torch.ones(2)], sync_opts(dist.AllreduceOptions, reduceOp=dist._make_nccl_premul_sum(2.0))), gloo=False)

    def empty(g):
        x = torch.zeros(0, dtype=torch.int32)
        w = g.allreduce([x], sync_opts(dist.AllreduceOptions))
        return [x, w.result()[0]]
    compare("all_reduce empty tensor (direct)", empty, gloo=False)

    def user_coalescing(g):
        # the Python group's public start/end_coalescing; the blocking all_reduce
        # inside must be collected by it, not take the fast path
        a = data(torch.float32, (3,), rank)
        g.start_coalescing()
        g.allreduce([a], sync_opts(dist.AllreduceOptions))
        w = g.end_coalescing()
        w.wait()
        return [a, torch.tensor(len(w.result()))]
    compare("start/end_coalescing", user_coalescing, gloo=False)

    def async_ar(g):
        x = data(torch.float32, (1000,), rank)
        w = dist.all_reduce(x, group=g, async_op=True)
        fut = w.get_future()
        fut.wait()                       # DDP's way: the future, never Work.wait()
        w.wait()
        return [x, fut.value()[0], torch.tensor(w.is_completed())]
    compare("all_reduce async", async_ar)
    check_path("all_reduce async", N.allreduce([torch.ones(2)], dist.AllreduceOptions()), False, dist.AllreduceOptions)
    # Over IALLREDUCE_ABOVE_BYTES an all_reduce is MPI_Iallreduce on every rank: the Python group's.
    check_path("all_reduce of 65 float32", N.allreduce([torch.ones(65)], sync_opts(dist.AllreduceOptions)),
               False, dist.AllreduceOptions)
    check_path("all_reduce of 64 float32", N.allreduce([torch.ones(64)], sync_opts(dist.AllreduceOptions)),
               True, dist.AllreduceOptions)

    def sync_future(g):
        x = data(torch.int64, (4,), rank)
        w = g.allreduce([x], sync_opts(dist.AllreduceOptions))
        if not torch_compat.has_async_op(dist.AllreduceOptions):
            w.wait()  # the call cannot say it blocks: it may return before the op ends (check_path)
        fut = w.get_future()
        return [x, fut.value()[0], torch.tensor([w.is_completed(), w.is_success(), fut.done()])]
    compare("finished work and future", sync_future)

    # Repeated blocking calls on one small tensor reuse the finished Work (see
    # native_mpi.cpp from_python); another tensor gets its own, results stay right.
    # Only blocking calls take the fast path (see check_path).
    if torch_compat.has_async_op(dist.AllreduceOptions):
        checks += 1
        t, u = torch.ones(3), torch.ones(3)
        w1 = N.allreduce([t], sync_opts(dist.AllreduceOptions))
        w2 = N.allreduce([t], sync_opts(dist.AllreduceOptions))
        w3 = N.allreduce([u], sync_opts(dist.AllreduceOptions))
        if not (w1 is w2 and w3 is not w1 and w3.result()[0] is u and w1.get_future().value()[0] is t):
            fail("work reuse", f"{w1!r} {w2!r} {w3!r}")
        if not (torch.equal(t, torch.full((3,), float(size * size))) and torch.equal(u, torch.full((3,), float(size)))):
            fail("work reuse results", f"{t} {u}")

    # ---- every other op through the native group (forwarded to the Python group)
    def all_gather(g):
        out = [torch.zeros(3, dtype=torch.int32) for _ in range(size)]
        dist.all_gather(out, data(torch.int32, (3,), rank), group=g)
        return out
    compare("all_gather", all_gather)

    def agit(g):
        out = torch.zeros(4 * size)
        dist.all_gather_into_tensor(out, data(torch.float32, (4,), rank), group=g)
        return out
    compare("all_gather_into_tensor", agit)

    def rsb(g):
        out = torch.zeros(2, dtype=torch.int64)
        dist.reduce_scatter_tensor(out, data(torch.int64, (2 * size,), rank), group=g)
        return out
    compare("reduce_scatter_tensor", rsb)

    def a2a(g):
        out = torch.zeros(2 * size)
        dist.all_to_all_single(out, data(torch.float32, (2 * size,), rank + 5), group=g)
        return out
    compare("all_to_all_single", a2a)

    def red(g):
        x = data(torch.float64, (3,), rank)
        dist.reduce(x, size - 1, op=R.MAX, group=g)
        return x if rank == size - 1 else torch.zeros(0)
    compare("reduce", red)

    def gat(g):
        outs = [torch.zeros(2) for _ in range(size)] if rank == 0 else None
        dist.gather(data(torch.float32, (2,), rank), outs, dst=0, group=g)
        return outs or []
    compare("gather", gat)

    def sca(g):
        out = torch.zeros(2)
        dist.scatter(out, [data(torch.float32, (2,), i) for i in range(size)] if rank == 0 else None, src=0, group=g)
        return out
    compare("scatter", sca)

    def coalesced(g):
        a, b = data(torch.float32, (3,), rank), data(torch.float32, (5,), rank + 1)
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            dist.all_reduce(a, group=g)
            dist.all_reduce(b, group=g)
        cm.wait()
        return [a, b]
    compare("coalescing_manager all_reduce", coalesced)

    def anysource(g):
        if rank == 0:
            got = []
            for _ in range(size - 1):
                t = torch.zeros(1)
                src = dist.recv(t, group=g, tag=9)   # Work.source_rank() through the native Work
                got.append((src, int(t.item())))
            return [torch.tensor(sorted(got))]
        dist.send(torch.tensor([rank * 10.0]), 0, group=g, tag=9)
        return []
    compare("recv anysource", anysource)

    def isend_irecv(g):
        nxt, prv = (rank + 1) % size, (rank - 1) % size
        r = torch.zeros(4)
        ws = [dist.isend(torch.full((4,), float(rank)), nxt, group=g, tag=4), dist.irecv(r, prv, group=g, tag=4)]
        for w in ws:
            w.wait()
        return [r, torch.tensor([w.is_completed() for w in ws])]
    compare("isend/irecv", isend_irecv)

    def functional(g):
        import torch.distributed._functional_collectives as fc
        x = data(torch.float32, (4,), rank)
        return fc.all_reduce(x, "sum", g)    # C++ looks the group up by name
    compare("functional all_reduce", functional)

    compare("barrier", lambda g: [torch.tensor(dist.barrier(group=g) is None)])

    # ---- a subgroup (its own communicator, MPI_Comm_create_group) also gets the fast path
    members = [0, size - 1]
    sub_n = dist.new_group(ranks=members, backend="mpi")
    sub_g = dist.new_group(ranks=members, backend="gloo")
    checks += 1
    if rank in members:
        x, y = data(torch.int32, (4,), rank), data(torch.int32, (4,), rank)
        w = finished(sub_n.allreduce([x], sync_opts(dist.AllreduceOptions, reduceOp=R.MAX)))
        dist.all_reduce(y, op=R.MAX, group=sub_g)
        path = "fast" if torch_compat.has_async_op(dist.AllreduceOptions) else "python"   # see check_path
        if type(sub_n).__name__ != "NativeMPIProcessGroup" or path_taken(w) != path or not torch.equal(x, y):
            fail("subgroup", f"{type(sub_n)} {path_taken(w)} {x} vs gloo {y}")
    elif sub_n is not dist.GroupMember.NON_GROUP_MEMBER:
        fail("subgroup non-member", repr(sub_n))
    passed = summarize("ops", status) and passed

if "ddp" in MODES:
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(group):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 5), nn.BatchNorm1d(5))
        ddp = DDP(model, process_group=group, bucket_cap_mb=0.001)   # several buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(rank)
        losses = []
        for _ in range(6):
            x, y = torch.randn(16, 10, generator=g), torch.randn(16, 5, generator=g)
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            # a blocking all_reduce of the loss: the fast path inside a DDP loop
            lt = loss.detach().clone()
            dist.all_reduce(lt, group=group)
            losses.append(lt)
        return torch.stack(losses), [p.detach().clone() for p in model.parameters()]

    ref = train(G)
    for name, group in (("native", N), ("python", P)):
        checks += 1
        got = train(group)
        if not (torch.equal(got[0], ref[0]) and all(torch.equal(a, b) for a, b in zip(got[1], ref[1]))):
            fail(f"ddp {name}", f"losses {got[0].tolist()} vs gloo {ref[0].tolist()}")
    passed = summarize("ddp", status) and passed
finish(passed)
