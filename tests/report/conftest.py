import os
import socket
import subprocess
import sys

import pytest

from synthetic import write_synthetic_run

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def real_run(tmp_path_factory):
    """A real traced 2-rank gloo DDP run (torch.multiprocessing.spawn)."""
    out = str(tmp_path_factory.mktemp("real") / "run")
    proc = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", out,
                           os.path.join(HERE, "spawn_ddp.py"), str(_free_port()), "p2p"],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def accum_run(tmp_path_factory):
    """A real traced 2-rank gloo DDP run with gradient accumulation (accum_ddp.py)."""
    out = str(tmp_path_factory.mktemp("accum") / "run")
    proc = subprocess.run([sys.executable, "-m", "commtrace", "run", "-o", out,
                           os.path.join(HERE, "accum_ddp.py"), str(_free_port())],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def syn_run(tmp_path_factory):
    """A synthetic 4-rank DDP-like run with p2p, a slow rank 2, phases and iterations."""
    d = str(tmp_path_factory.mktemp("syn") / "run")
    return write_synthetic_run(d, ranks=4, ops_per_rank=300, seed=1, p2p=True, slow_rank=2)


def cli(*argv):
    from commtrace.cli import main
    return main([str(a) for a in argv])
