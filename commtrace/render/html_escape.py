"""The one escaping path of the HTML report: every string that reaches the page
(trace strings above all: callsites, group names, labels, marks, regions, hosts)
goes through ``text`` (HTML text and attributes, and plotly labels, which plotly
parses as a small subset of HTML) or ``script_json`` (data inside <script>)."""
from __future__ import annotations

import html
import json
import math

import numpy as np

# Inside <script>, "</script>" or "<!--" would end or change the script; U+2028/9
# end a line in older JavaScript. \\uXXXX keeps the JSON value the same.
_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                   0x2028: "\\u2028", 0x2029: "\\u2029"}


def text(value) -> str:
    """A string for HTML text, an attribute value or a plotly label: & < > " ' escaped."""
    return html.escape("" if value is None else str(value), quote=True)


def _plain(v):
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (str, int, bool)):
        return v
    return str(v)


def script_json(value) -> str:
    """``value`` as JSON that is safe inside <script>...</script> (NaN -> null)."""
    return json.dumps(_plain(value), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).translate(_SCRIPT_ESCAPES)
