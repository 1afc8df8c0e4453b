"""What a program can see of its environment: run untraced and traced, the
outputs must be equal (tests/transparency/test_probe.py).

usage: probe.py OUT PORT [--spawn]

Writes OUT.<role><rank>.json per process (role: "rank" for a process that
joins the gloo world, "parent" for the process that runs mp.spawn). Under an
MPI launcher without commtrace the rendezvous variables are derived here, as a
program would (commtrace fills them in deliberately: see README).
"""
import json
import os
import signal
import sys
import threading
import time

SNAPSHOT_MODULES = ("mpi4py", "mpi4py.MPI", "numpy", "pandas", "rich", "torch", "torch.distributed",
                    "sitecustomize", "usercustomize")


def _handler_name(h) -> str:
    if h is None:
        return "None"
    if h in (signal.SIG_DFL, signal.SIG_IGN):
        return signal.Handlers(h).name
    if h is signal.default_int_handler:
        return "default_int_handler"
    return f"callable {getattr(h, '__module__', '?')}.{getattr(h, '__qualname__', '?')}"


def process_view() -> dict:
    """Things that do not need torch."""
    handlers = {}
    for s in signal.valid_signals():
        try:
            handlers[signal.Signals(s).name] = _handler_name(signal.getsignal(s))
        except (ValueError, OSError):
            pass
    main = threading.current_thread() is threading.main_thread()
    prev_fd = signal.set_wakeup_fd(-1) if main else None  # as asyncio does when it closes
    if prev_fd not in (None, -1):
        signal.set_wakeup_fd(prev_fd)
    sc = sys.modules.get("sitecustomize")
    return {
        "modules": [m for m in SNAPSHOT_MODULES if m in sys.modules],
        "sitecustomize": getattr(sc, "__file__", None),
        "signals": handlers,
        "wakeup_fd": prev_fd,
        "threads": sorted(t.name for t in threading.enumerate()),
        "active_count": threading.active_count(),
        "argv": sys.argv[1:],
        "path": [p for p in sys.path if p],
        "environ": dict(os.environ),
    }


def own_handlers() -> dict:
    """The program installs its own SIGUSR1 and SIGTERM handlers, signals itself,
    and puts back what it found: its handlers must get the signals."""
    got = []
    out = {}
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        old = signal.signal(sig, lambda s, f: got.append(s))
        os.kill(os.getpid(), sig)
        deadline = time.monotonic() + 5
        while sig not in got and time.monotonic() < deadline:
            time.sleep(0.001)  # the handler runs between bytecodes of this loop
        back = signal.signal(sig, old)
        out[signal.Signals(sig).name] = {"found": _handler_name(old), "got": sig in got,
                                        "replaced": _handler_name(back) != "None",
                                        "after": _handler_name(signal.getsignal(sig))}
    return out


def torch_view() -> dict:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    Backend = dist.Backend
    out = {
        "is_available": dist.is_available(),
        "is_mpi_available": dist.is_mpi_available(),
        "is_gloo_available": dist.is_gloo_available(),
        "is_nccl_available": dist.is_nccl_available(),
        "is_ucc_available": dist.is_ucc_available(),
        "is_backend_available": {b: dist.is_backend_available(b) for b in ("mpi", "gloo", "nccl", "ucc")},
        "backend_list": list(Backend.backend_list),
        "plugins": sorted(Backend._plugins),
        "default_device_backend_map": dict(Backend.default_device_backend_map),
        "backend_capability": {k: list(v) for k, v in Backend.backend_capability.items()},
        "backend_type_map": sorted(Backend.backend_type_map),
        "Backend('mpi')": str(Backend("mpi")),
        "c10d_mpi_names": sorted(n for n in dir(c10d) if "mpi" in n.lower()),
        "c10d_MPI_AVAILABLE": getattr(c10d, "_MPI_AVAILABLE", "absent"),
        "torch_distributed_mpi_names": sorted(n for n in dir(dist) if "mpi" in n.lower()),
        "is_initialized": dist.is_initialized(),
        "is_torchelastic_launched": dist.is_torchelastic_launched(),
    }
    return out


# The all_reduce's tensor outlives the group: gloo's worker thread may still be dropping
# the finished op (and its tensor) when the group is destroyed. Were that the tensor's
# last reference, freeing it would need the GIL, which the destroying thread holds:
# torch 2.4 deadlocks there (~ProcessGroupGloo waits for the worker), later releases
# can abort at interpreter exit ("terminate called without an active exception").
KEEP_ALIVE = []


def world_view() -> dict:
    import torch
    import torch.distributed as dist
    t = torch.ones(4)
    dist.all_reduce(t)
    KEEP_ALIVE.append(t)
    return {
        "get_backend": dist.get_backend(),
        "world": [dist.get_rank(), dist.get_world_size()],
        "sum": t.tolist(),
        "is_initialized": dist.is_initialized(),
        "is_mpi_available_after_init": dist.is_mpi_available(),
    }


def internals() -> dict:
    """Only where commtrace runs (not compared): proof that there was something to hide."""
    if "commtrace.capture.activate" not in sys.modules:
        return {}
    real = getattr(signal.getsignal, "__wrapped__", signal.getsignal)
    return {"real_sigterm": _handler_name(real(signal.SIGTERM)),
            "os_threads": len(sys._current_frames()), "threading_threads": threading.active_count()}


def write(out: str, name: str, view: dict) -> None:
    view["_internals"] = internals()
    with open(f"{out}.{name}.json", "w") as f:
        json.dump(view, f, indent=1, sort_keys=True, default=str)


def rank_main(out: str, port: str, rank=None, world=None) -> None:
    start = process_view()  # before anything else: what the program sees at its start
    env = os.environ
    # What a program launched by mpirun must do itself without commtrace.
    if rank is None:
        rank = int(env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", "0")))
        world = int(env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", "1")))
    master = {"MASTER_ADDR": env.get("MASTER_ADDR", "127.0.0.1"), "MASTER_PORT": env.get("MASTER_PORT", port)}
    probes = torch_view()
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://{master['MASTER_ADDR']}:{master['MASTER_PORT']}",
                           rank=rank, world_size=world)
    view = {"start": start, "torch": probes, "world": world_view(), "after": process_view(),
            "own_handlers": own_handlers()}
    dist.destroy_process_group()
    write(out, f"rank{rank}", view)


def spawned(index: int, out: str, port: str) -> None:
    rank_main(out, port, index, 2)


if __name__ == "__main__":
    out, port = sys.argv[1], sys.argv[2]
    if "--spawn" in sys.argv:
        start = process_view()
        import torch.multiprocessing as mp
        probes = torch_view()
        mp.spawn(spawned, args=(out, port), nprocs=2)
        write(out, "parent", {"start": start, "torch": probes, "after": process_view()})
    else:
        rank_main(out, port)
