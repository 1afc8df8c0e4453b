"""``commtrace compare BASE EXP [EXP ...]``: runs side by side, deltas against BASE."""
from __future__ import annotations

import argparse

from ..errors import EXIT_OK

EPILOG = """\
example:
  commtrace compare runs/bucket25 runs/bucket50 runs/bucket100

Per op (and per phase once phases are recorded): count, bytes, mean, p50, p90,
p95, p99 of the per-rank op duration, each with its change in % against BASE.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="compare runs side by side", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Compare runs per op (and phase): counts, bytes, duration percentiles, deltas vs BASE.")
    p.add_argument("base", metavar="BASE", help="baseline run directory")
    p.add_argument("exps", nargs="+", metavar="EXP", help="run directories to compare with BASE")
    p.add_argument("--by", metavar="COLS", help="group by these frame columns, comma-separated (default: phase,op if phases exist, else op)")
    p.add_argument("--width", type=int, metavar="COLS", help="output width in columns")
    p.add_argument("--json", metavar="FILE", help="write the comparison as JSON ('-': stdout, no table)")
    p.set_defaults(handler=run_compare)


def compare_json(cmp: dict) -> dict:
    from ..analysis.report import _clean
    rows = []
    for key, row in cmp["table"].iterrows():
        key = key if isinstance(key, tuple) else (key,)
        item = {b: str(k) for b, k in zip(cmp["by"], key)}
        for name in cmp["runs"]:
            item[name] = {stat: _clean(row[(name, stat)]) for (n, stat) in cmp["table"].columns if n == name}
        rows.append(item)
    return {"format": "commtrace-compare", "version": 1, "base": cmp["runs"][0], "runs": cmp["runs"],
            "by": cmp["by"], "rows": rows}


def run_compare(ns) -> int:
    from ..analysis.compare import compare_runs
    from ..analysis.run_info import load_report_run
    from ..errors import CommtraceError
    from . import export
    from .cli_commands import warn

    runs = []
    names = []
    for d in [ns.base] + list(ns.exps):
        run = load_report_run(d)
        for issue in run.issues:
            warn(issue)
        name = d.rstrip("/\\") or d
        if name in names:
            name = f"{name} ({len(names) + 1})"
        names.append(name)
        runs.append((name, run.frame))
    by = [c.strip() for c in ns.by.split(",") if c.strip()] if ns.by else None
    if by:
        missing = [c for c in by if c not in runs[0][1].columns]
        if missing:
            raise CommtraceError(f"--by: unknown column(s) {', '.join(missing)}")
    cmp = compare_runs(runs, by)
    if ns.json:
        export.write_json(compare_json(cmp), ns.json)
        if ns.json == "-":
            return EXIT_OK
    from .terminal import make_console, render_compare
    render_compare(make_console(ns.width), cmp)
    return EXIT_OK
