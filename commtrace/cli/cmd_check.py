"""``commtrace check [RUN_DIR]``: diagnose hangs, desyncs, crashes and stragglers.

Exit codes: 0 clean, 1 problems found, 2 unusable input (``CommtraceError``).
"""
from __future__ import annotations

import json
import sys

HELP = "diagnose hangs, desyncs, crashes and stragglers"
EPILOG = """\
reports, per process group, the last sequence number each rank completed;
collectives some ranks entered and others never did; mismatches at the same
sequence number (op type, sizes, dtype, reduce op, root); ranks that raised or
exited early, also before any process group existed; traces that end abruptly;
trace data that cannot be read (named per file); watchdog/signal dumps.
ranks with equal state are folded into rank ranges ("rank 0-699,701-1023 entered:
completed"); --json keeps every rank (docs/faults.md, "Many ranks").

big runs: a run that does not fit --memory-limit (or with --partitioned /
--dask) is checked seq chunk by seq chunk on every core (map/reduce), with the
same findings (docs/faults.md, "Big runs").

exit codes: 0 clean, 1 problems found (--strict: warnings too; unreadable data
too), 2 unusable input (no trace file can be read at all; --dask unreachable).
"""


def add_parser(subparsers) -> None:
    import argparse
    p = subparsers.add_parser("check", help=HELP, description=HELP, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="run directory (default: newest in ./commtrace-out)")
    p.add_argument("--json", action="store_true", help="print findings as JSON")
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings (stragglers, ...) too")
    p.add_argument("-v", "--verbose", action="store_true", help="show details of informational findings")
    from .options import add_scale_arguments
    add_scale_arguments(p, perfetto=False, doing="check", how="seq chunk by seq chunk")
    p.set_defaults(handler=run_check)


def run_check(ns) -> int:
    from ..analysis.check import exit_code
    from ..analysis.partitioned.check_map import check_run
    from .options import memory_limit_of
    checked = check_run(ns.run_dir, dask=ns.dask, memory_limit=memory_limit_of(ns.memory_limit),
                        partitioned=ns.partitioned)
    run, findings = checked.run, checked.findings
    if ns.json:
        json.dump({"run_dir": run.path, "findings": [f.to_dict() for f in findings],
                   "exit_code": exit_code(findings, ns.strict)}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        from ..render.check_text import render_findings
        from ..render.terminal import make_console
        con = make_console()
        render_findings(findings, con, title=f"commtrace check {run.path}", verbose=ns.verbose)
    return exit_code(findings, ns.strict)

