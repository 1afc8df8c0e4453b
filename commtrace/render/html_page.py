"""One self-contained HTML file for ``report --html`` and ``compare --html``: the
terminal report's text and tables (sortable), plotly figures, a partial plotly.js
bundle (bar and scatter traces only: plotly-basic.min.js, shipped in this package)
and the page's script inline -- nothing is fetched when the file is opened.

The tables are the terminal renderers' own: they draw into a console whose ``table_sink``
(render.tables) receives every table unfitted, so the page shows the terminal's rows and notes."""
from __future__ import annotations

import io
import re
from importlib import resources

from ..errors import CommtraceError
from . import html_figures as figs
from .html_escape import script_json, text
from .terminal import make_console

_CLOSE_SCRIPT = re.compile(r"</(script)", re.IGNORECASE)

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 24px 48px;color:#212121}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
pre.text{background:#f7f7f7;padding:8px 12px;overflow-x:auto;font-size:13px}
table{border-collapse:collapse;margin:12px 0 4px;font-size:13px}
table caption{text-align:left;font-weight:bold;padding:4px 0}
table th{background:#eee;padding:3px 8px;white-space:nowrap}table.sortable th{cursor:pointer;user-select:none}
table.sortable th[data-sort=asc]::after{content:" \\25B2"}table.sortable th[data-sort=desc]::after{content:" \\25BC"}
table td{padding:2px 8px;border-bottom:1px solid #eee;white-space:pre}
td.num,th.num{text-align:right}td.txt,th.txt{text-align:left}
p.note{color:#666;font-size:12px;margin:2px 0 12px}
td.better{color:#2e7d32;font-weight:bold}td.worse{color:#c62828;font-weight:bold}
.compare-grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:0 16px}
#steady-bar{position:sticky;top:0;z-index:5;background:#e3f2fd;border:1px solid #90caf9;padding:6px 10px;margin:8px 0}
body[data-view=steady] .view-all,body[data-view=all] .view-steady{display:none}
.notice{background:#fff8e1;border:1px solid #ffcc80;padding:6px 10px;margin:8px 0}
#op-tip{position:absolute;display:none;z-index:10;max-width:360px;background:#fff;border:1px solid #999;
 box-shadow:2px 2px 6px rgba(0,0,0,.2);padding:6px 8px;font-size:12px;pointer-events:none}
#op-detail{font-size:12px;border:1px solid #ddd;padding:6px 8px;min-height:2em}
dl{display:grid;grid-template-columns:max-content auto;gap:1px 10px;margin:4px 0}
dt{color:#555}dd{margin:0;white-space:pre-wrap;word-break:break-all}.detail-title{font-weight:bold}
"""


class TableRecorder:
    """A console for the terminal renderers; ``take()`` gives, in order, ("text", str) for printed
    text and ("table", title, columns, rows, note, styles) for each table."""

    def __init__(self) -> None:
        self._buf = io.StringIO()
        self.console = make_console(200, self._buf)   # plain: a StringIO is no terminal
        self.console.table_sink = self._table  # type: ignore[attr-defined]
        self.blocks: list[tuple] = []

    def _table(self, columns, rows, title, note, styles=None) -> None:
        self.take()
        self.blocks.append(("table", title, columns, rows, note, styles))

    def take(self) -> list[tuple]:
        s = self._buf.getvalue()
        if s.strip():
            self.blocks.append(("text", s.strip("\n")))
        self._buf.seek(0)
        self._buf.truncate()
        return self.blocks


# The terminal's cell colours that carry meaning (compare: a change better / worse than BASE).
_STYLE_CLASS = {"green": " better", "red": " worse"}


def blocks_html(blocks: list[tuple], compare: bool = False) -> str:
    """Tables sortable by a click on a header, except ``compare``'s (a run's row, then its changes,
    belong together), whose green / red cells are changes better / worse than BASE."""
    hint, cls = ("", "plain") if compare else (' title="click to sort"', "sortable")
    parts = []
    for b in blocks:
        if b[0] == "text":
            parts.append(f'<pre class="text">{text(b[1])}</pre>')
            continue
        _, title, columns, rows, note, styles = b
        head = "".join(f'<th class="{"num" if c.right else "txt"}"{hint}>{text(c.name)}</th>' for c in columns)
        styles = styles if compare and styles else [[]] * len(rows)
        body = "".join("<tr>" + "".join(
            f'<td class="{"num" if c.right else "txt"}{_STYLE_CLASS.get(st[j] if j < len(st) else None, "")}">'
            f'{text(v)}</td>' for j, (c, v) in enumerate(zip(columns, r))) + "</tr>" for r, st in zip(rows, styles))
        cap = f"<caption>{text(title)}</caption>" if title else ""
        parts.append(f'<table class="{cls}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
                     + (f'<p class="note">{text(note)}</p>' if note else ""))
    return "\n".join(parts)


PLOTLY_BUNDLE = "plotly-basic.min.js"   # plotly.js-basic-dist-min 4.1.1 (MIT): bar, pie and scatter traces


def _script(name: str) -> str:
    """A script shipped in commtrace.render (the partial plotly.js bundle: 1.2 MB where the full
    plotly.min.js is 4.8 MB; the page's own), made safe to inline."""
    try:
        src = resources.files("commtrace.render").joinpath(name).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise CommtraceError(f"--html: {name} is missing from this commtrace install") from e
    return _CLOSE_SCRIPT.sub(r"<\\/\1", src)


def _figure_section(fid: str, title: str, fig: dict | None, registry: list, intro: str = "") -> str:
    if fig is None:
        return ""
    registry.append({"id": fid, "figure": {"data": fig["data"], "layout": fig["layout"]}})
    note = f'<p class="note">{text(fig["note"])}</p>' if fig.get("note") else ""
    intro = f'<p class="note">{text(intro)}</p>' if intro else ""
    return f'<h2>{text(title)}</h2>{intro}<div id="{fid}" class="figure"></div>{note}'


def _page(title: str, body: str, data: dict) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:; font-src data:\">"
            f"<title>{text(title)}</title><style>{STYLE}</style></head><body>\n{body}\n"
            '<div id="op-tip"></div>\n'
            f'<script id="commtrace-data" type="application/json">{script_json(data)}</script>\n'
            f"<script>{_script(PLOTLY_BUNDLE)}</script>\n<script>{_script('html_app.js')}</script>\n"
            "</body></html>\n")


def _report_blocks(rep) -> list[tuple]:
    """The terminal report's banner and tables (render.terminal), recorded."""
    from .terminal import (render_banner, render_modules, render_nothing_shown, render_regions, render_skew,
                           render_steps, render_summary)
    rec = TableRecorder()
    render_banner(rec.console, rep)
    if not render_nothing_shown(rec.console, rep):   # the terminal's words, unreadable records told
        for render in (render_steps, render_summary, render_regions, render_modules, render_skew):
            render(rec.console, rep)
    return rec.take()


def steady_report(rep, top: int = 10, **analyse_kw):
    """``rep``'s steady steps (``--steps N:``, N: analysis.figures.steady_start) analysed as ``rep``
    was (``analyse_kw``: dask, memory_limit); None unless ``rep`` is a whole run of two steps or more."""
    from ..analysis.figures import steady_start
    from ..analysis.partitioned import analyse
    from ..analysis.window import Window
    if not rep.window.whole_run or rep.steps is None:
        return None
    n = steady_start(rep.steps.per_rank)
    if n is None:
        return None
    return analyse(rep.path, window=Window(steps=(n, None)), top=top, op_view=rep.op_view is not None,
                   partitioned=not rep.whole, **analyse_kw)


def report_html(rep, top: int = 10, steady=None) -> str:
    """The page of report ``rep``; timeline, arrival heatmap and bandwidth only when it holds every op
    (``rep.op_view``). With ``steady`` (``steady_report``) every table and figure is there for the
    steady steps (shown first) and the whole run (behind a toggle); the timeline opens on the steady steps."""
    every_op = rep.op_view is not None
    steady_step = steady.window.steps[0] if steady is not None else None
    views = [("all", rep)] if steady is None else [("steady", steady), ("all", rep)]
    registry: list = []
    tl = figs.timeline_figure(rep, steady_step) if every_op and (rep.info["ops"] or len(rep.op_view.spans)) else None
    notes = "".join(f'<div class="notice">{text(n)}</div>' for n in (tl or {}).get("notes", []))
    if not every_op:
        notes += ('<div class="notice">Analysed file by file (partitioned): the timeline, the arrival-skew '
                  "heatmap and the bandwidth plot need every op in one place and are left out.</div>")
    body = [f"<h1>{text('commtrace report')}</h1>"]
    if steady is not None:
        opens = "; the timeline opens on these steps" if tl is not None else ""
        body.append(f'<div id="steady-bar"><b>Steady state</b>: steps {steady_step} to the last -- set-up ops and '
                    f"the step{'s' if steady_step > 2 else ''} before step {steady_step} (one-off work: process "
                    "group and DDP set-up, warm-up) are left out of every table and figure below, as with "
                    f"<code>commtrace report RUN --steps {steady_step}:</code>{opens}. "
                    '<label><input type="checkbox" id="show-setup"> show set-up and the first step '
                    "(the whole run)</label></div>")
    sections = [_view_sections(name, r, registry, every_op, len(views) > 1) for name, r in views]
    body += [s[0] for s in sections]
    if not every_op:
        body.append(notes)
    if tl is not None:
        body.append('<h2>Timeline</h2><p class="note">One lane per rank: communication ops coloured by kind, '
                    "along them a thin strip of their exposed (red) and hidden (green) communication -- the "
                    "per-step chart's colours -- and the rank's compute (forward / backward / optimizer) under it; "
                    "dotted "
                    "lines: where each step begins. Hover an op for its summary and the same collective on the "
                    "other ranks; click it for every field.</p>" + notes +
                    '<div id="timeline" class="figure"></div><div id="op-detail">click an op to keep its fields '
                    "here</div>")
    body += [s[1] for s in sections]
    data = {"timeline": None if tl is None else {k: tl[k] for k in ("data", "layout", "ops", "spans", "lanes",
                                                                    "aggregated")}, "figures": registry}
    return _page(f"commtrace report {rep.info.get('run_dir', '')}", "\n".join(body), data)


def _view_sections(name: str, rep, registry: list, every_op: bool, several: bool) -> tuple[str, str]:
    """One view's banner, and its chart, tables and figures (ids suffixed by its name if several)."""
    blocks = _report_blocks(rep)
    banner, tables = (blocks[0][1], blocks[1:]) if blocks and blocks[0][0] == "text" else ("", blocks)
    sfx = "-" + name if several else ""
    body = [_figure_section("steps-chart" + sfx, "Per step", figs.steps_figure(rep), registry,
                            "compute (no comm) + hidden comm + exposed comm + other = the rank's step time "
                            "(docs/report.md)"),
            "<h2>Tables</h2>" + blocks_html(tables)]
    if every_op:
        body.append(_figure_section("skew-heatmap" + sfx, "Arrival skew", figs.skew_heatmap(rep), registry))
    body.append(_figure_section("stragglers" + sfx, "Straggler ranking", figs.stragglers_figure(rep), registry))
    if every_op:
        body.append(_figure_section("bandwidth" + sfx, "Bandwidth against message size", figs.bandwidth_figure(rep),
                                    registry))
    for f in registry:
        f.setdefault("view", name if several else None)
    cls = f' class="view-{name}"' if several else ""
    bid = "banner" + sfx
    return (f'<div{cls}><pre class="text" id="{bid}">{text(banner)}</pre></div>',
            f"<div{cls}>" + "\n".join(body) + "</div>")


def compare_html(cmp: dict) -> str:
    from .compare_text import render_compare
    rec = TableRecorder()
    render_compare(rec.console, cmp)
    blocks = rec.take()
    registry: list = []
    charts = "".join(f"<div>{_figure_section(fid, title, fig, registry)}</div>"
                     for fid, title, fig in figs.compare_figures(cmp))
    body = [f"<h1>{text('commtrace compare')}</h1>",
            '<p class="note">Per run: the median over the steps shown (as in the table below), the whisker from '
            "p25 to p75; busbw over every collective. Colour: the change against BASE -- green better, red worse, "
            "grey within the noise band, purple a different amount of communication. Axes start at 0.</p>",
            f'<div class="compare-grid">{charts}</div>',
            "<h2>Tables</h2>" + blocks_html(blocks, compare=True)]
    return _page("commtrace compare", "\n".join(body), {"timeline": None, "figures": registry})


def write_html(html: str, path: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(html)
    except OSError as e:
        raise CommtraceError(f"--html {path}: {e.strerror or e}") from e
