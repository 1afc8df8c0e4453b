"""Tables that fit the console: columns are dropped (least important first) or their headers
abbreviated before any cell would be cut; numbers are never cut. Plain and colour output share the
layout (ASCII rules, same widths): colour only adds styles.
"""
from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

ASCII_SIMPLE = box.Box("    \n    \n -- \n    \n    \n -- \n    \n    \n", ascii=True)
PAD = 1                    # the box's column divider (a space) between columns
MAX_TEXT = 28              # widest a free-text key column gets before its cells are shortened


@dataclass
class Column:
    name: str
    right: bool = True           # numbers are right-aligned
    drop: int = 0                # 0: always kept; higher numbers are dropped first
    short: str | None = None     # a shorter header, used before dropping anything
    text: bool = False           # free text (group names, details): may be shortened with "~"


def fit(columns: list[Column], rows: list[list[str]], width: int) -> tuple[list[int], list[str], list[int]]:
    """(kept column indices, their headers, their widths) such that the table fits ``width``."""
    keep = list(range(len(columns)))
    headers = [c.name for c in columns]
    cols_cells = [[r[i] for r in rows] for i in range(len(columns))]
    widths = [max([len(headers[i])] + [len(c) for c in cols_cells[i]]) for i in range(len(columns))]
    for i, c in enumerate(columns):   # free text never takes more than MAX_TEXT while numbers need room
        if c.text and widths[i] > MAX_TEXT:
            widths[i] = max(MAX_TEXT, len(headers[i]))

    def total() -> int:
        return sum(widths[i] + PAD for i in keep) - PAD

    for i, c in enumerate(columns):   # 1. abbreviate headers wider than their cells
        if total() <= width:
            break
        if c.short and len(c.short) < len(headers[i]):
            headers[i] = c.short
            widths[i] = max([len(c.short)] + [min(len(x), widths[i]) for x in cols_cells[i]])
    droppable = sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: (-columns[i].drop, -i))
    while total() > width and droppable:  # 2. drop the least important columns
        keep.remove(droppable.pop(0))
    for i in keep:                    # 3. last resort: shorten free text, never numbers
        if total() <= width:
            break
        if columns[i].text:
            widths[i] = max(len(headers[i]), widths[i] - (total() - width), 8)
    return keep, [headers[i] for i in keep], [widths[i] for i in keep]


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 1)] + "~"


def print_table(con: Console, columns: list[Column], rows: list[list[str]], *, title: str | None = None,
                styles: list[list[str | None]] | None = None, note: str | None = None) -> list[str]:
    """Print a fitted table; returns the names of the columns shown. ``styles``: per cell a rich
    style (colour mode only); ``note`` (dim, naming dropped columns) under it. A console with a
    ``table_sink`` (the HTML page's) gets every column and row unfitted."""
    sink = getattr(con, "table_sink", None)
    if sink is not None:
        sink(columns, rows, title, note, styles)
        return [c.name for c in columns]
    width = int(con.width)
    keep, headers, widths = fit(columns, rows, width)
    if title:
        con.print(Text(title, style="bold"), overflow="fold")
    tab = Table(box=ASCII_SIMPLE, show_edge=False, pad_edge=False, header_style="bold", padding=0)
    for h, i, w in zip(headers, keep, widths):
        tab.add_column(h, justify="right" if columns[i].right else "left", no_wrap=True, min_width=w, max_width=w)
    plain = getattr(con, "plain", True)
    for ri, r in enumerate(rows):
        cells = []
        for i, w in zip(keep, widths):
            s = shorten(r[i], w) if columns[i].text else r[i]
            style = None if plain or styles is None else styles[ri][i]
            cells.append(Text(s, style=style or ""))
        tab.add_row(*cells)
    con.print(tab)
    dropped = [columns[i].name for i in range(len(columns)) if i not in keep]
    if note or dropped:
        extra = (f"not shown at this width: {', '.join(dropped)} (--width)" if dropped else "")
        con.print(Text("; ".join(x for x in (note, extra) if x), style="dim"), overflow="fold")
    return [columns[i].name for i in keep]
