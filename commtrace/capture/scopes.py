"""Functions wrapped to run inside an annotation context: the ops they issue carry
its fields (phase, detail, module). Phase hooks (DDP, Join, ...) and the FSDP/TP
module tracker wrap torch's functions this way."""
from __future__ import annotations

import functools

from .tbhide import drop_own_frame


def in_context(rec, orig, enter, leave=None):
    """``orig`` wrapped: ``enter(args)`` pushes an annotation context on ``rec`` (and
    returns its token), popped by ``leave`` (default ``rec.pop_context``) when ``orig``
    returns or raises; a raised exception's traceback reads as without commtrace."""
    leave = leave or rec.pop_context

    @functools.wraps(orig)
    def scoped(*args, **kwargs):
        token = enter(args)
        try:
            return orig(*args, **kwargs)
        except BaseException as e:
            drop_own_frame(e)
            raise
        finally:
            leave(token)
    return scoped
