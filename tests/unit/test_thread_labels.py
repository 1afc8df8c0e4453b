"""AnnotationContext on real threads: a program thread reads none of the process's labels, its
scopes are its own, and it reads and sets the process's once it claims them (it trains)."""
from __future__ import annotations

import threading

from commtrace.capture.annotation_context import AnnotationContext


def _in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.update(result=fn()))
    t.start()
    t.join()
    return out["result"]


def test_program_thread_scopes_are_its_own_until_it_claims():
    ctx = AnnotationContext()
    ctx.set_context(phase="forward", module="Net")
    main_key = ctx.context_key

    def side():
        token = ctx.begin_program_thread()
        seen = [ctx.current_context_key()]
        scope = ctx.push_context(api="all_gather_object")
        seen.append(ctx.current_context_key())
        ctx.set_context(phase="backward")  # a module boundary / a phase of its own: it claims
        seen.append(ctx.current_context_key())
        ctx.pop_context(scope)  # its scope ended after the claim: nothing of the process's is restored
        ctx.end_program_thread(token)
        return seen

    seen = _in_thread(side)
    assert seen[0] is None
    assert seen[1] == (("api", "all_gather_object"),)
    assert seen[2] == (("module", "Net"), ("phase", "backward"))
    assert ctx.context_key == (("module", "Net"), ("phase", "backward"))  # the claim set the process's
    assert not ctx.thread_context_keys and not ctx.thread_context_ids
    ctx.set_context(phase="forward")
    assert ctx.context_key == main_key


def test_program_thread_scope_leaves_main_thread_labels_alone():
    ctx = AnnotationContext()
    ctx.set_context(phase="forward", module="Net")
    pushed, go_on = threading.Event(), threading.Event()

    def side():
        token = ctx.begin_program_thread()
        scope = ctx.push_context_field("api", "gather_object")
        pushed.set()
        go_on.wait()
        ctx.pop_context(scope)  # once restored the process's context as it was at the push
        ctx.end_program_thread(token)

    t = threading.Thread(target=side)
    t.start()
    pushed.wait()
    ctx.set_context(phase="backward")  # the main thread moves on meanwhile
    go_on.set()
    t.join()
    assert ctx.context_key == (("module", "Net"), ("phase", "backward"))
    assert not ctx.thread_context_keys
