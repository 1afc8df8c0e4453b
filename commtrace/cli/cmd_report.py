"""``commtrace report [RUN_DIR]``: the terminal report and the exports."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

from ..errors import EXIT_FINDINGS, EXIT_OK
from .options import add_by_argument, add_scale_arguments, add_window_arguments, by_of, window_of

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


def _dir_size(path: str | None) -> int:
    try:
        with os.scandir(path or ".") as it:
            return sum(e.stat().st_size for e in it if e.is_file())
    except OSError:
        return 0


@contextlib.contextmanager
def _stages(run_dir: str | None, steps: int):
    """Yields advance(description); a rich progress bar on a TTY stderr for big runs."""
    big = _dir_size(run_dir) > 16 * 2**20 if run_dir else False
    if not (big and sys.stderr.isatty()):
        yield lambda desc: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("reading traces", total=steps)
        first = [True]

        def advance(desc: str) -> None:
            if not first[0]:
                prog.advance(task)
            first[0] = False
            prog.update(task, description=desc)
        yield advance


def run_report(ns) -> int:
    from .options import wants_partitioned
    if wants_partitioned(ns):
        return _run_partitioned(ns)
    from ..analysis.report import build_report, report_json
    from ..analysis.run_info import load_report_run
    from ..trace.reader import newest_run
    from ..render import export
    from .messages import warn_issues

    window = window_of(ns)
    run_dir = ns.run_dir if ns.run_dir is not None else newest_run()
    with _stages(run_dir, 4) as advance:
        advance("reading traces")
        run = load_report_run(run_dir)
        warn_issues(run.issues)
        advance("matching and summarizing")
        rep = build_report(run, window, top=ns.top)
        by = _by_table(ns, rep)
        if ns.perfetto:
            advance("writing Perfetto trace")
            from ..render.perfetto import write_perfetto
            write_perfetto(rep.frame, ns.perfetto, rep.info["t0_ns"], rep.matched.inst, run.processes,
                           spans=rep.spans, marks=rep.marks, regions=rep.region_spans)
        advance("writing exports")
        if ns.csv:
            export.write_csv(rep.frame, ns.csv)
        if ns.parquet:
            export.write_parquet(rep.frame, ns.parquet)
        if ns.json:
            export.write_json(_with_by(report_json(rep), by), ns.json)
        if ns.html:
            from ..render.html_page import report_html, write_html
            write_html(report_html(rep, top=ns.top), ns.html)
    if not (ns.quiet or ns.json == "-"):
        from ..render.terminal import make_console, render_report
        con = make_console(ns.width)
        render_report(con, rep, events=ns.events, limit=ns.limit, top=ns.top, by=by)
    return _damage_verdict(run, ns)


def _by_table(ns, rep) -> tuple | None:
    """(keys, table) of --by on one frame (compare's breakdown of one run), or None."""
    by = by_of(ns)
    if by is None:
        return None
    from ..analysis.compare import check_by, keyed_summary
    check_by(by, [rep.frame])
    return by, keyed_summary(rep, by)


def _with_by(data: dict, by: tuple | None) -> dict:
    """The report's JSON with --by's table (key ``by``: its ``keys`` and ``rows``)."""
    if by is not None:
        from ..analysis.report import json_safe, table_records
        data["by"] = json_safe({"keys": by[0], "rows": table_records(by[1])})
    return data


# -q alone still reads the run (its warnings, and the exit code says whether the data is damaged) but
# would print nothing at all: say so, before the damage line that scripts read last.
QUIET_ALONE = ("commtrace: -q: nothing written (no --json, --csv, --parquet, --html or --perfetto given); "
               "the exit code says whether the trace data is readable")


def _damage_verdict(run, ns) -> int:
    """Exit 1, with one line naming what was unreadable, when trace data is damaged
    (the figures leave it out); else 0. Processes that just died are not damage."""
    if ns.quiet and not (ns.perfetto or ns.csv or ns.parquet or ns.json or ns.html):
        sys.stderr.write(QUIET_ALONE + "\n")
    damage = [d for p in run.processes for d in (p.get("damage") or [])]
    if not damage:
        return EXIT_OK
    shown = "; ".join(damage[:3]) + (f"; and {len(damage) - 3} more" if len(damage) > 3 else "")
    sys.stderr.write(f"commtrace: unreadable trace data left out of the figures: {shown} "
                     f"(commtrace check {run.path})\n")
    return EXIT_FINDINGS


def _run_partitioned(ns) -> int:
    """The report by map/reduce over the run's files (analysis.partitioned)."""
    from ..analysis.partitioned import analyse
    from ..errors import CommtraceError
    from .messages import warn_issues
    from ..render.partitioned import partitioned_json, render_partitioned
    from .options import memory_limit_of
    if ns.perfetto_max_mb <= 0:
        raise CommtraceError(f"--perfetto-max-mb {ns.perfetto_max_mb:g}: must be positive")
    from ..render import export
    window = window_of(ns)
    shown = not (ns.quiet or ns.json == "-")
    if shown:
        from ..render.terminal import make_console
        con = make_console(ns.width)
    limit = memory_limit_of(ns.memory_limit)
    keys = by_of(ns)
    s = analyse(ns.run_dir, dask=ns.dask, memory_limit=limit, top=ns.top, window=window,
                timeline_width=con.width if shown else None, compare_by=keys)
    by = (keys, s.summary(keys)) if keys else None
    warn_issues(s.issues)
    if ns.perfetto:
        from ..render.partitioned import write_perfetto_pieces
        files = write_perfetto_pieces(ns.perfetto, s, ns.perfetto_max_mb)
        sys.stderr.write(f"commtrace: Perfetto trace in {len(files)} file(s) of at most {ns.perfetto_max_mb:g} MB: "
                         + ", ".join(files[:4]) + (" ..." if len(files) > 4 else "") + "\n")
    if ns.csv or ns.parquet:
        from ..render.export_ranks import write_by_rank
        write_by_rank(s, ns.csv, ns.parquet)
    if ns.json:
        export.write_json(_with_by(partitioned_json(s), by), ns.json)
    if ns.html:
        from ..render.html_page import report_html, write_html
        from ..render.partitioned import as_report
        rep = as_report(s)
        steady = None
        if window.whole_run and rep.steps is not None:   # the page opens on the steady steps: their report too
            from ..analysis.figures import steady_start
            from ..analysis.window import Window
            n = steady_start(rep.steps.per_rank)
            if n is not None:
                steady = as_report(analyse(ns.run_dir, dask=ns.dask, memory_limit=limit, top=ns.top,
                                           window=Window(steps=(n, None))))
        write_html(report_html(rep, every_op=False, top=ns.top, steady=steady), ns.html)
    if shown:
        render_partitioned(con, s, ns.top, ns.events, ns.limit, limit, by=by)
    from types import SimpleNamespace
    return _damage_verdict(SimpleNamespace(processes=s.processes, path=s.path), ns)
