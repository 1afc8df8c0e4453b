"""The one escaping path of the HTML report: every string that reaches the page
(trace strings above all: callsites, group names, labels, marks, regions, hosts)
goes through ``text`` (HTML text and attributes, and plotly labels, which plotly
parses as a small subset of HTML) or ``script_json`` (data inside <script>)."""
from __future__ import annotations

import html
import json

# Inside <script>, "</script>" or "<!--" would end or change the script; U+2028/9
# end a line in older JavaScript. \\uXXXX keeps the JSON value the same.
_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                   0x2028: "\\u2028", 0x2029: "\\u2029"}


def text(value) -> str:
    """A string for HTML text, an attribute value or a plotly label: & < > " ' escaped."""
    return html.escape("" if value is None else str(value), quote=True)


def script_json(value) -> str:
    """``value`` as JSON that is safe inside <script>...</script> (NaN -> null)."""
    from ..analysis.report import json_safe
    return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False, default=str,
                      separators=(",", ":")).translate(_SCRIPT_ESCAPES)
