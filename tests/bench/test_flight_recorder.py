"""benchmarks/flight_recorder.py against torch itself: the Flight Recorder's size is read once per
process (a group made after changing TORCH_FR_BUFFER_SIZE still records), and the switch stops and
resumes recording exactly as TORCH_FR_BUFFER_SIZE=0 would. Two real gloo ranks."""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import helpers as h  # noqa: E402


def _rank(rank, port, out):
    import torch
    import torch.distributed as dist

    import flight_recorder as fr
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.ones(1)
    seen = {"start": fr.fr_entries()}
    switch = fr.FlightRecorderSwitch()
    dist.all_reduce(x)
    seen["on"] = fr.fr_entries()
    switch.off()
    seen["off_flag"] = switch.enabled
    dist.all_reduce(x)
    seen["off"] = fr.fr_entries()
    switch.on()
    os.environ["TORCH_FR_BUFFER_SIZE"] = "0"   # read once per process: a later group still records
    g = dist.new_group([0, 1])
    dist.all_reduce(x, group=g)
    seen["new_group"] = fr.fr_entries()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(seen, f)
    dist.destroy_process_group()


def _probe(env_extra: dict) -> str:
    """What FlightRecorderSwitch() says in a fresh one-rank gloo process: "ok" or "unavailable: ..."."""
    import subprocess
    code = ("import os, sys, torch.distributed as dist; sys.path.insert(0, %r); import flight_recorder as fr\n"
            "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(%d))\n"
            "dist.init_process_group('gloo', rank=0, world_size=1)\n"
            "try:\n    fr.FlightRecorderSwitch()\n    print('ok')\nexcept fr.Unavailable as e:\n    print('unavailable:', e)\n"
            % (os.path.join(ROOT, "benchmarks"), h.free_port()))
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env_extra},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return h.without_gloo_log(p.stdout)


@pytest.fixture(scope="module")
def switchable():
    """Skip where the switch cannot find this torch's Flight Recorder at all (torch 2.4
    has none for gloo), saying why."""
    said = _probe({"TORCH_FR_BUFFER_SIZE": "2000"})  # on, whatever the environment says
    if said != "ok":
        pytest.skip(f"the Flight Recorder switch does not work on this torch: {said}")


@pytest.fixture(scope="module")
def seen(tmp_path_factory, switchable):
    # On, whatever the environment or the release says (the default is 2000 entries in
    # torch 2.13, 0 -- off -- in 2.8); the spawned ranks inherit it.
    before = os.environ.get("TORCH_FR_BUFFER_SIZE")
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    out = str(tmp_path_factory.mktemp("fr") / "seen.json")
    try:
        mp.spawn(_rank, args=(h.free_port(), out), nprocs=2)
    finally:
        if before is None:
            del os.environ["TORCH_FR_BUFFER_SIZE"]
        else:
            os.environ["TORCH_FR_BUFFER_SIZE"] = before
    with open(out) as f:
        return json.load(f)


def test_switch_stops_and_resumes_recording(seen):
    assert seen["on"] == seen["start"] + 1
    assert seen["off_flag"] is False and seen["off"] == seen["on"]
    assert seen["new_group"] == seen["off"] + 1


def test_refuses_a_recorder_that_is_off(switchable):
    assert _probe({"TORCH_FR_BUFFER_SIZE": "0"}).startswith("unavailable: the Flight Recorder is off in this process")
