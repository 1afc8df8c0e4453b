"""A traced program makes the same choices as untraced: tests/transparency/probe.py
prints what a program can probe (backend availability, c10d registries and
attributes, get_backend, environment, signal handlers, wakeup fd, threads,
sys.modules entries, sitecustomize, sys.path, argv) and must print the same
with and without `commtrace run`, under mpirun, torchrun and mp.spawn.

Excluded, on purpose (README "What tracing changes"): COMMTRACE_* variables;
commtrace's boot directory in PYTHONPATH; RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT, which `commtrace run` fills in under MPI
launchers; and the variables whose values launchers make up afresh for every
job (compared by name only).
"""
from __future__ import annotations

import glob
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import helpers as h  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")
BOOT_DIR = os.path.join(h.REPO, "commtrace", "capture", "_boot")
FILLED_BY_COMMTRACE = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
# Values a launcher makes up per job (ids, ports, temp dirs): compared by name only.
PER_JOB_PREFIXES = ("OMPI_", "PMIX_", "PRTE_", "OPAL_", "TORCHELASTIC_", "HYDRA_", "PMI_")
PER_JOB_NAMES = {"TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}


def _launch(kind: str, traced: bool, tmp) -> dict:
    out = str(tmp / ("traced" if traced else "plain"))
    port = str(h.free_port())
    target = [PROBE, out, port] + (["--spawn"] if kind == "spawn" else [])
    ct = [h.PY, "-m", "commtrace", "run", "-o", str(tmp / "run")] if traced else [h.PY]
    # The program has its own sitecustomize: it must run, and be `sitecustomize`, traced too.
    site = tmp / "usersite"   # written by probes() before both launches
    if kind == "mpirun":
        # MASTER_PORT: the port of both (commtrace run keeps it; the untraced probe reads it)
        res = h.run(h.mpirun_cmd(2, *ct, *target), env=h.mpi_env(PYTHONPATH=site, MASTER_PORT=port), timeout=120)
    elif kind == "torchrun":
        tr = [h.TORCHRUN, "--nproc_per_node", "2", "--master_port", str(h.free_port())]
        res = h.run(tr + (["-m", "commtrace", "run", "-o", str(tmp / "run")] if traced else []) + target,
                    env=h.clean_env(PYTHONPATH=site), timeout=120)
    else:
        res = h.run(ct + target, env=h.clean_env(PYTHONPATH=site), timeout=120)
    res.check(0)
    views = {}
    for path in glob.glob(out + ".*.json"):
        with open(path) as f:
            # the two launches differ in these arguments only (output prefix, rendezvous port)
            text = f.read().replace(out, "<out>").replace(json.dumps(port), '"<port>"')
        views[path[len(out) + 1:-len(".json")]] = json.loads(text)
    return views


def _comparable_env(env: dict) -> dict:
    out = {}
    for k, v in env.items():
        if k.startswith("COMMTRACE_") or k in FILLED_BY_COMMTRACE:
            continue
        if k == "PYTHONPATH":
            v = os.pathsep.join(p for p in v.split(os.pathsep) if p and os.path.abspath(p) != BOOT_DIR)
            if not v:
                continue
        if k.startswith(PER_JOB_PREFIXES) or k in PER_JOB_NAMES:
            v = "<per job>"
        out[k] = v
    return out


def _comparable(view: dict) -> dict:
    view = json.loads(json.dumps(view))
    view.pop("_internals", None)
    for part in ("start", "after"):
        if part in view:
            view[part]["environ"] = _comparable_env(view[part]["environ"])
    return view


def _diff(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: untraced {a.get(k, '<absent>')!r} traced {b.get(k, '<absent>')!r}")
            else:
                out += _diff(a[k], b[k], f"{path}/{k}")
        return out
    return [] if a == b else [f"{path}: untraced {a!r} traced {b!r}"]


@pytest.fixture(scope="module", params=["mpirun", "torchrun", "spawn"])
def probes(request, tmp_path_factory):
    kind = request.param
    if kind == "mpirun" and not os.path.exists(h.MPIRUN):
        pytest.skip("no mpirun in the venv")
    tmp = tmp_path_factory.mktemp(f"probe-{kind}")
    (tmp / "usersite").mkdir()
    (tmp / "usersite" / "sitecustomize.py").write_text("import os\nos.environ['PROBE_USER_SITECUSTOMIZE'] = 'ran'\n")
    plain, traced = h.concurrently(lambda: _launch(kind, False, tmp), lambda: _launch(kind, True, tmp))
    return kind, plain, traced, tmp / "run"


def test_traced_program_sees_what_untraced_sees(probes):
    kind, plain, traced = probes[:3]
    expected = {"rank0", "rank1"} | ({"parent"} if kind == "spawn" else set())
    assert set(plain) == expected and set(traced) == expected, (sorted(plain), sorted(traced))
    diffs = []
    for name in sorted(expected):
        diffs += [f"{kind} {name}{d}" for d in _diff(_comparable(plain[name]), _comparable(traced[name]))]
    assert not diffs, "\n".join(diffs)


def test_the_probed_run_was_traced(probes):
    _, _, traced, run_dir = probes
    frame = h.load(run_dir)
    assert sorted(frame["rank"].unique()) == [0, 1]
    assert set(frame["op"].astype(str)) == {"all_reduce"}
    for name in ("rank0", "rank1"):
        view = traced[name]
        # the program's own sitecustomize ran (in the launcher's process too, under mpirun) and is the module
        assert view["start"]["sitecustomize"].endswith(os.path.join("usersite", "sitecustomize.py"))
        assert view["start"]["environ"]["PROBE_USER_SITECUSTOMIZE"] == "ran"
        # the program's own signal handlers got their signals
        assert all(v["got"] for v in view["own_handlers"].values()), view["own_handlers"]
    # there was something to hide: commtrace's SIGTERM handler and threads are there
    for name in ("rank0", "rank1"):
        inside = traced[name]["_internals"]
        assert inside["real_sigterm"].startswith("callable commtrace."), inside
        assert inside["os_threads"] > inside["threading_threads"], inside
    assert traced["rank0"]["world"]["get_backend"] == "gloo"


def test_explicit_mpi_request_works_without_changing_probes(tmp_path):
    """init_process_group("mpi") and new_group(backend="mpi") on PyPI torch, under
    mpirun + commtrace run: served, and is_mpi_available() is False before and after."""
    if not os.path.exists(h.MPIRUN):
        pytest.skip("no mpirun in the venv")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_request.py")
    res = h.run(h.mpirun_cmd(2, h.PY, "-m", "commtrace", "run", "-o", tmp_path / "run", script),
                env=h.mpi_env(), timeout=120).check(0)
    lines = sorted((json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")), key=lambda d: d["rank"])
    assert [d["rank"] for d in lines] == [0, 1], res.stdout
    for d in lines:
        assert d["backend"] == d["sub_backend"] == "mpi"
        assert d["before"] == [False, False, False, False]
        # mpi4py is in sys.modules now: the program's own mpi backend imported it
        assert d["after"] == [False, False, False, True]
        assert d["world"] == [2.0, 2.0] and d["sub"] == [3.0, 3.0, 3.0]
    frame = h.load(tmp_path / "run")
    assert len(frame) == 4 and set(frame["backend"].astype(str)) == {"mpi"}, res.stderr[-3000:]
