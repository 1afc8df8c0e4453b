"""Options several commands share: the window (report, compare) and the scale of the
analysis (report, compare, check), parsed here (analysis.memory_policy decides); and
the one analysis call of report and compare."""
from __future__ import annotations

import sys

from ..errors import CommtraceError

# Warning lines about the trace files printed at most (problems that differ per file, e.g. each names
# its file): then one line with how many more.
WARNINGS_SHOWN = 16


def unknown_option(command: str, name: str, options) -> CommtraceError:
    """The one-line error for an option ``command`` does not have, naming the closest one it has."""
    import difflib
    close = difflib.get_close_matches(name, sorted(o for o in options if o.startswith("--")), n=1)
    hint = f"did you mean {close[0]}?" if close else f"commtrace {command} -h lists them"
    return CommtraceError(f"{command}: unknown option {name} ({hint})")


def add_window_arguments(p) -> None:
    """--steps/--skip-steps/--from/--to/--phase (report and compare)."""
    p.add_argument("--steps", metavar="A:B", help="only optimizer steps A..B (A:, :B and A also work)")
    p.add_argument("--skip-steps", type=int, metavar="N", help="leave out the first N steps (warm-up) and "
                   "everything before them")
    p.add_argument("--from", dest="t_from", metavar="TIME", help="only ops starting after TIME (e.g. 1.5s, 200ms)")
    p.add_argument("--to", dest="t_to", metavar="TIME", help="only ops starting before TIME")
    p.add_argument("--phase", metavar="P[,P]", help="only ops of these phases (forward, backward, optimizer, "
                   "ddp_init, tp_init, dtensor_init, join, '-' for none)")


def add_by_argument(p, default: str) -> None:
    """--by COLS (report and compare): breakdown keys."""
    p.add_argument("--by", metavar="COLS", help=f"breakdown keys, comma-separated ({default}; e.g. module,phase, "
                   "mesh_dim,op or group,op)")


def by_of(ns) -> list | None:
    """--by's keys (checked: analysis.compare.check_by), None without --by."""
    from ..analysis.compare import check_by
    keys = [c.strip() for c in ns.by.split(",") if c.strip()] if ns.by else None
    if keys is not None:
        check_by(keys)
    return keys


def window_of(ns):
    from ..analysis.window import Window
    return Window.from_args(steps=ns.steps, skip_steps=ns.skip_steps, t_from=ns.t_from, t_to=ns.t_to,
                            phase=ns.phase)


def add_scale_arguments(p, perfetto: bool = True, doing: str = "analyse", how: str = "file by file") -> None:
    """--dask / --memory-limit / --partitioned (docs/report-performance.md, "Big runs") and, with
    ``perfetto``, --perfetto-max-mb; ``doing`` / ``how`` name the command's work in the help."""
    p.add_argument("--dask", metavar="SCHEDULER", help=f"{doing} on this Dask cluster (address; default "
                   "$COMMTRACE_DASK): the run directory must be on a filesystem its workers share")
    p.add_argument("--memory-limit", metavar="SIZE", help="memory it may use (e.g. 8G, 512M, 25%%; "
                   f"default 50%% of RAM): a run that does not fit is done {how}")
    p.add_argument("--partitioned", action="store_true", help=f"{doing} {how} (map/reduce) even if the "
                   "run fits in memory")
    if not perfetto:
        return
    p.add_argument("--perfetto-max-mb", type=float, default=1000, metavar="MB", help="partitioned: --perfetto "
                   "writes files of at most MB each (rank subsets; a rank with more ops: time windows; default 1000)")


def analyse_run(ns, run_dir: str, window, keys: list | None, op_view: bool = False, **kw):
    """The one analysis of a run for report and compare (its issues warned): the --by ``keys`` are one
    more of its tables."""
    from ..analysis.partitioned import analyse
    s = analyse(run_dir, dask=ns.dask, memory_limit=memory_limit_of(ns.memory_limit), window=window,
                partitioned=ns.partitioned, compare_by=keys, op_view=op_view, **kw)
    warn_issues(s.issues)
    return s


def memory_limit_of(text: str | None) -> int | None:
    """"8G", "512M", "25%" (of RAM), plain bytes -> bytes; None -> None (the default)."""
    from ..analysis.memory_policy import total_memory
    if text is None:
        return None
    t = text.strip().upper().removesuffix("B")
    try:
        if t.endswith("%"):
            value = total_memory() * float(t[:-1]) / 100
        else:
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
            value = float(t[:-1] if t[-1:] in "KMGT" else t) * mult
    except ValueError:
        value = -1
    if not value > 0:
        raise CommtraceError(f"--memory-limit {text}: not a size (e.g. 8G, 512M, 25%)")
    return int(value)


def warn_issues(issues) -> None:
    """The reader's issues on stderr, one line per problem folded over ranks (``trace.issues.fold_issues``:
    "rank 512-1023 (512 files): ..."), at most ``WARNINGS_SHOWN``: they do not grow with the ranks."""
    from ..render.fmt import plain_safe
    from ..trace.issues import fold_issues, issue_line
    lines = [issue_line(alike) for alike in fold_issues(issues)]
    if len(lines) > WARNINGS_SHOWN:
        lines[WARNINGS_SHOWN:] = [f"... and {len(lines) - WARNINGS_SHOWN} more problems with the trace files "
                                  "(commtrace check names each)"]
    for line in lines:
        print(f"commtrace: warning: {plain_safe(line)}", file=sys.stderr)
