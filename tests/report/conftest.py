import os
import subprocess
import sys

import helpers
import pytest

from synthetic import write_synthetic_run

HERE = os.path.dirname(os.path.abspath(__file__))


def _traced(out: str, script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", out, os.path.join(HERE, script),
                           str(helpers.free_port()), *args], capture_output=True, text=True,
                           timeout=180)   # two at once (real_runs), beside another worker's tests
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory):
    """The two real traced 2-rank gloo DDP runs below, launched at once (independent jobs);
    once per test run (eight files read them)."""
    def make(folder):
        real, accum = str(folder / "real"), str(folder / "accum")
        return helpers.concurrently(lambda: _traced(real, "spawn_ddp.py", "p2p"),
                                    lambda: _traced(accum, "accum_ddp.py"))
    return helpers.once_per_run(tmp_path_factory, "real_runs", make)


@pytest.fixture(scope="session")
def real_run(real_runs):
    """A real traced 2-rank gloo DDP run (torch.multiprocessing.spawn)."""
    return real_runs[0]


@pytest.fixture(scope="session")
def accum_run(real_runs):
    """A real traced 2-rank gloo DDP run with gradient accumulation (accum_ddp.py)."""
    return real_runs[1]


@pytest.fixture(scope="session")
def syn_run(tmp_path_factory):
    """A synthetic 4-rank DDP-like run with p2p, a slow rank 2, phases and iterations."""
    d = str(tmp_path_factory.mktemp("syn") / "run")
    return write_synthetic_run(d, ranks=4, ops_per_rank=300, seed=1, p2p=True, slow_rank=2)


def cli(*argv):
    from commtrace.cli import main
    return main([str(a) for a in argv])
