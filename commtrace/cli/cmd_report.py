"""``commtrace report [RUN_DIR]``: the terminal report and the exports."""
from __future__ import annotations

import argparse
import sys

from ..errors import EXIT_FINDINGS, EXIT_OK, CommtraceError
from .options import (add_by_argument, add_scale_arguments, add_window_arguments, analyse_run, by_of,
                      memory_limit_of, window_of)

EPILOG = """\
examples:
  commtrace report                          newest run under ./commtrace-out/
  commtrace report runs/exp1 --skip-steps 2          leave out warm-up steps
  commtrace report runs/exp1 --steps 10:20 --phase backward
  commtrace report runs/exp1 --from 1.5s --to 1.7s --events
  commtrace report runs/exp1 --perfetto trace.json     open in ui.perfetto.dev
  commtrace report runs/exp1 --html report.html        one file, opens offline in a browser
  commtrace report runs/exp1 --by module,mesh_dim      one more table, by any columns
  commtrace report runs/exp1 --csv ops.csv --json summary.json

Windows (--steps, --skip-steps, --from/--to, --phase) apply to every table and
export; the banner says which window is shown. Steps are optimizer steps,
numbered from 1; times (--from/--to) are after the first traced op: 1.5s,
200ms, 30us. Every figure is defined in docs/report.md.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="summarize a run in the terminal", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Summarize a traced run: banner, steps, per-op/phase/region tables, skew, "
                                   "timeline; export it.")
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="run directory (default: newest under ./commtrace-out/)")
    p.add_argument("--width", type=int, metavar="COLS", help="output width in columns (default: the terminal's)")
    add_window_arguments(p)
    p.add_argument("--events", action="store_true", help="list every op in time order (partitioned: streamed "
                   "from the files, one chunk per file in memory)")
    p.add_argument("--limit", type=int, metavar="N", help="at most N events")
    add_by_argument(p, "one more summary table, after the per-phase one")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows in the skew tables (default 10)")
    p.add_argument("--perfetto", metavar="FILE", help="write Chrome trace-event JSON (ui.perfetto.dev)")
    p.add_argument("--csv", metavar="FILE", help="write one row per op per rank as CSV")
    p.add_argument("--parquet", metavar="FILE", help="write one row per op per rank as Parquet")
    p.add_argument("--json", metavar="FILE", help="write the summary numbers as JSON ('-': stdout, no report)")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report (tables, timeline, plots)")
    p.add_argument("-q", "--quiet", action="store_true", help="no terminal report (exports only)")
    add_scale_arguments(p)
    p.set_defaults(handler=run_report)


def run_report(ns) -> int:
    """One analysis (analysis.partitioned.analyse): the run is held whole when it fits the memory
    limit, then the views that draw each op get them in one frame (its op view); else they read
    the files rank by rank (Perfetto in pieces, CSV / Parquet rank by rank, no per-op HTML figures)."""
    from ..trace.reader import newest_run
    if ns.perfetto_max_mb <= 0:
        raise CommtraceError(f"--perfetto-max-mb {ns.perfetto_max_mb:g}: must be positive")
    window = window_of(ns)
    run_dir = ns.run_dir if ns.run_dir is not None else newest_run()
    shown = not (ns.quiet or ns.json == "-")
    if shown:
        from ..render.terminal import make_console
        con = make_console(ns.width)
    limit = memory_limit_of(ns.memory_limit)
    keys = by_of(ns)
    s = analyse_run(ns, run_dir, window, keys, op_view=bool(ns.perfetto or ns.csv or ns.parquet or ns.html),
                    top=ns.top, timeline_width=con.width if shown else None)
    by = None
    if keys is not None:   # --by: compare's breakdown of this one run
        by = keys, s.summary(keys)
    _write_exports(ns, s, limit, by)
    if shown:
        from ..render.terminal import render_report
        render_report(con, s, events=ns.events, limit=ns.limit, top=ns.top, memory_limit=limit, by=by)
    return _damage_verdict(s.processes, s.path, ns)


def _write_exports(ns, s, limit, by) -> None:
    """The exports of report ``s``: from its op view when it holds every op, else file by file."""
    from ..analysis.report import report_json
    from ..render import export
    v = s.op_view
    if ns.perfetto and v is not None:
        from ..render.perfetto import write_perfetto
        write_perfetto(v.frame, ns.perfetto, s.info["t0_ns"], v.matched.inst, s.processes,
                       spans=v.spans, marks=v.marks, regions=v.region_spans)
    elif ns.perfetto:
        from ..render.perfetto import write_perfetto_pieces
        files = write_perfetto_pieces(ns.perfetto, s, ns.perfetto_max_mb)
        sys.stderr.write(f"commtrace: Perfetto trace in {len(files)} file(s) of at most {ns.perfetto_max_mb:g} MB: "
                         + ", ".join(files[:4]) + (" ..." if len(files) > 4 else "") + "\n")
    if v is not None:
        if ns.csv:
            export.write_csv(v.frame, ns.csv)
        if ns.parquet:
            export.write_parquet(v.frame, ns.parquet)
    elif ns.csv or ns.parquet:
        from ..render.export import write_by_rank
        write_by_rank(s, ns.csv, ns.parquet)
    if ns.json:
        export.write_json(report_json(s, by), ns.json)
    if ns.html:
        from ..render.html_page import report_html, steady_report, write_html
        write_html(report_html(s, top=ns.top, steady=steady_report(s, ns.top, dask=ns.dask, memory_limit=limit)),
                   ns.html)


# -q alone still reads the run (its warnings, and the exit code says whether the data is damaged) but
# would print nothing at all: say so, before the damage line that scripts read last.
QUIET_ALONE = ("commtrace: -q: nothing written (no --json, --csv, --parquet, --html or --perfetto given); "
               "the exit code says whether the trace data is readable")


def _damage_verdict(processes: list, run_dir: str, ns) -> int:
    """Exit 1, with one line naming what was unreadable, when trace data is damaged
    (the figures leave it out); else 0. Processes that just died are not damage."""
    if ns.quiet and not (ns.perfetto or ns.csv or ns.parquet or ns.json or ns.html):
        sys.stderr.write(QUIET_ALONE + "\n")
    damage = [d for p in processes for d in (p.get("damage") or [])]
    if not damage:
        return EXIT_OK
    shown = "; ".join(damage[:3]) + (f"; and {len(damage) - 3} more" if len(damage) > 3 else "")
    sys.stderr.write(f"commtrace: unreadable trace data left out of the figures: {shown} "
                     f"(commtrace check {run_dir})\n")
    return EXIT_FINDINGS
