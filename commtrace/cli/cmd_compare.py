"""``commtrace compare BASE EXP [EXP ...]``: runs side by side, per step, then per op."""
from __future__ import annotations

import argparse

from ..errors import EXIT_OK, CommtraceError
from .options import add_by_argument, add_scale_arguments, add_window_arguments, analyse_run, by_of, window_of

EPILOG = """\
examples:
  commtrace compare runs/bucket25 runs/bucket50 runs/bucket100
  commtrace compare runs/a runs/b --skip-steps 2 --by phase,op,bucket --json cmp.json

First per step (the same windows as `commtrace report`: --steps, --skip-steps,
--from/--to, --phase, applied to every run): step time, compute, communication,
exposed communication, ops and bytes per step -- median over steps with the
spread (half the interquartile range), and each EXP's change against BASE with
a noise band. Then per op (per phase and op once phases are recorded; any
columns with --by): collectives, ops, bytes, mean/p50/p99 duration and busbw,
with changes against BASE. Definitions: docs/report.md.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="compare runs side by side", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Compare runs per step (step time, communication, exposed communication, with "
                                   "noise) and per op, with changes against BASE.")
    p.add_argument("base", metavar="BASE", help="baseline run directory")
    p.add_argument("exps", nargs="+", metavar="EXP", help="run directories to compare with BASE")
    add_window_arguments(p)
    add_by_argument(p, "default: phase,op if phases exist, else op")
    p.add_argument("--width", type=int, metavar="COLS", help="output width in columns (default: the terminal's)")
    p.add_argument("--json", metavar="FILE", help="write the comparison as JSON ('-': stdout, no table)")
    p.add_argument("--html", metavar="FILE", help="write the comparison as a self-contained HTML page")
    add_scale_arguments(p)
    p.set_defaults(handler=run_compare)


def run_compare(ns) -> int:
    from ..analysis.compare import compare_reports
    from ..render import export
    from ..render.compare_text import compare_json, render_compare

    window = window_of(ns)
    by = by_of(ns)
    named: list = []
    for d in [ns.base] + list(ns.exps):
        name = d.rstrip("/\\") or d
        if name in (n for n, _ in named):
            name = f"{name} ({len(named) + 1})"
        try:
            named.append((name, analyse_run(ns, d, window, by)))
        except CommtraceError as e:     # which run (e.g. --steps 9:12 beyond one run's steps)
            if str(e).startswith(d):
                raise
            raise CommtraceError(f"{d}: {e}", e.code) from None
    cmp = compare_reports(named, by)
    if ns.html:
        from ..render.html_page import compare_html, write_html
        write_html(compare_html(cmp), ns.html)
    if ns.json:
        export.write_json(compare_json(cmp), ns.json)
        if ns.json == "-":
            return EXIT_OK
    from ..render.terminal import make_console
    render_compare(make_console(ns.width), cmp)
    return EXIT_OK
