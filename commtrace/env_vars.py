"""Environment variables set for a while, then put back as they were."""
import contextlib
import os


def restore(saved: dict) -> None:
    """Put back the variables of ``saved`` (name -> value before; None: unset) and empty it."""
    os.environ.update({k: v for k, v in saved.items() if v is not None})
    for k in [k for k, v in saved.items() if v is None]:
        os.environ.pop(k, None)
    saved.clear()


@contextlib.contextmanager
def setting(env: dict):
    """``with setting({"X": "1"}):`` runs the block with ``env`` set, then restores the variables."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        restore(saved)
