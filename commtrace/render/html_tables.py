"""The terminal report's own text and tables, as HTML: the terminal renderers draw
into a console whose ``table_sink`` (render.tables) receives every table unfitted,
so the page shows the same rows, numbers and notes as the terminal."""
from __future__ import annotations

import io

from rich.console import Console

from .html_escape import text


class TableRecorder:
    """A console for the terminal renderers; ``blocks`` holds, in order,
    ("text", str) for printed text and ("table", title, columns, rows, note, styles)."""

    def __init__(self) -> None:
        self._buf = io.StringIO()
        self.console = Console(file=self._buf, width=200, color_system=None, no_color=True, highlight=False,
                               emoji=False, soft_wrap=False, force_terminal=False)
        self.console.plain = True  # type: ignore[attr-defined]
        self.console.table_sink = self._table  # type: ignore[attr-defined]
        self.blocks: list[tuple] = []

    def _flush(self) -> None:
        s = self._buf.getvalue()
        if s.strip():
            self.blocks.append(("text", s.strip("\n")))
        self._buf.seek(0)
        self._buf.truncate()

    def _table(self, columns, rows, title, note, styles=None) -> None:
        self._flush()
        self.blocks.append(("table", title, columns, rows, note, styles))

    def take(self) -> list[tuple]:
        self._flush()
        out, self.blocks = self.blocks, []
        return out


# The terminal's cell colours that carry meaning (compare: a change better / worse than BASE).
_STYLE_CLASS = {"green": " better", "red": " worse"}


def table_html(columns, rows, title, note, sortable: bool = True, styles=None) -> str:
    """A table (``sortable``: by a click on a header); ``styles``: the terminal's per-cell styles where
    green / red mean better / worse (compare's changes get a class), else None."""
    hint = ' title="click to sort"' if sortable else ""
    head = "".join(f'<th class="{"num" if c.right else "txt"}"{hint}>{text(c.name)}</th>' for c in columns)
    styles = styles or [[]] * len(rows)
    body = "".join("<tr>" + "".join(
        f'<td class="{"num" if c.right else "txt"}{_STYLE_CLASS.get(st[j] if j < len(st) else None, "")}">'
        f'{text(v)}</td>' for j, (c, v) in enumerate(zip(columns, r))) + "</tr>" for r, st in zip(rows, styles))
    cap = f"<caption>{text(title)}</caption>" if title else ""
    cls = "sortable" if sortable else "plain"
    html = f'<table class="{cls}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    if note:
        html += f'<p class="note">{text(note)}</p>'
    return html


def blocks_html(blocks: list[tuple], sortable: bool = True, deltas: bool = False) -> str:
    """``sortable=False`` for tables whose rows belong together (compare: a run's row, then its changes);
    ``deltas``: the tables' green / red cells are changes, better / worse (compare)."""
    parts = []
    for b in blocks:
        if b[0] == "text":
            parts.append(f'<pre class="text">{text(b[1])}</pre>')
        else:
            _, title, columns, rows, note, styles = b
            parts.append(table_html(columns, rows, title, note, sortable, styles if deltas else None))
    return "\n".join(parts)
