"""Rendering of ``commtrace check`` findings (rich; plain when not a TTY). Trace strings are escaped
(``fmt.safe``): trace contents never inject markup or control sequences.
"""
from __future__ import annotations

from rich.console import Console

from ..analysis.check import ERROR, INFO, PROGRESS, WARNING, Finding
from ..trace.rank_ranges import FOLD_SHOWN
from .fmt import safe

_STYLE = {ERROR: ("bold red", "ERROR"), WARNING: ("yellow", "WARN "), INFO: ("dim", "info ")}


def render_findings(findings: list[Finding], console: Console, title: str | None = "commtrace check",
                    verbose: bool = False) -> None:
    """A summary line, the problems (most severe first), then group progress; at most ``FOLD_SHOWN``
    findings of a kind, then how many more (bounded at any rank count). ``verbose``: info details too."""
    errors = sum(f.severity == ERROR for f in findings)
    warnings = sum(f.severity == WARNING for f in findings)
    if title:
        console.print(f"[bold]{safe(title)}[/bold]")
    if errors or warnings:
        console.print(f"[bold red]{errors} error(s)[/bold red], [yellow]{warnings} warning(s)[/yellow]")
    else:
        console.print("[green]no problems found[/green]")
    problems = [f for f in findings if f.kind != PROGRESS]
    shown: dict[str, int] = {}   # kind -> findings printed
    for f in problems:
        shown[f.kind] = shown.get(f.kind, 0) + 1
        if shown[f.kind] > FOLD_SHOWN:
            continue   # ranks that ended alike are one finding already: these differ (each names its file, ...)
        style, tag = _STYLE.get(f.severity, ("", f.severity))
        console.print(f"[{style}]{tag}[/{style}] {safe(f.title)}", soft_wrap=True)
        if f.severity != INFO or verbose:
            for line in f.details:
                console.print(f"        {safe(line)}", soft_wrap=True)
    for kind, n in shown.items():
        if n > FOLD_SHOWN:
            console.print(f"... and {n - FOLD_SHOWN} more {kind} findings (--json lists every one)")
    progress = [f for f in findings if f.kind == PROGRESS]
    if progress:
        console.print("[bold]progress per group[/bold] (last sequence number completed by each rank)")
        # Groups whose members got to different seqs first (where a hang shows), then the rest; at most
        # FOLD_SHOWN groups (a job with hundreds of subgroups), then how many more.
        ordered = sorted(progress, key=lambda f: not _uneven(f))
        for f in ordered[:FOLD_SHOWN]:
            console.print(f"  {safe(f.title)}", soft_wrap=True)
        left = ordered[FOLD_SHOWN:]
        if left:
            even = sum(not _uneven(f) for f in left)
            console.print(f"  ... and {len(left)} more groups ({even} of them with every member at the same seq; "
                          f"--json lists every one)")


def _uneven(progress: Finding) -> bool:
    """A progress finding whose members completed different last seqs."""
    return len({str(v.get("last_completed")) for v in progress.data.get("ranks", {}).values()}) > 1
