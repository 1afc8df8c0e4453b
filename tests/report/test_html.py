"""``report --html`` / ``compare --html``: one self-contained page, the terminal's
tables, escaped trace strings; then the page in a real headless Chromium (skipped,
saying why, when no Chromium is installed: .ci/run installs Debian's)."""
import json
import os
import re
import sys

import pytest

from commtrace.analysis.partitioned import analyse
from commtrace.render.fmt import fmt_ns

from .conftest import cli

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cdp import Browser, find_chromium  # noqa: E402
from tracebuilder import Proc, write_run  # noqa: E402

# Markup in every trace string the page shows: none of it may do anything.
EVIL = '</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">\u2028<b>b</b>&amp;'
OPS_PER_RANK = 6


@pytest.fixture(scope="module")
def markup_run(tmp_path_factory):
    """2 ranks, 2 steps of forward / backward / optimizer, 3 ops per step; trace strings with markup."""
    procs = [Proc(r, host=EVIL, group_name=EVIL, group_desc=EVIL) for r in range(2)]
    for p in procs:
        for s, t in ((1, 0), (2, 60)):
            p.span("forward", t, t + 10, step=s, module=EVIL)
            p.span("backward", t + 10, t + 40, step=s)
            p.span("optimizer", t + 40, t + 50, step=s)
            p.op("broadcast", t + 1, t + 3, nbytes=8, is_async=False, root=0, phase="forward")
            p.op("all_reduce", t + 15 + p.rank, t + 30, nbytes=4000, phase="backward", bucket=0, callsite=EVIL)
            p.op("all_reduce", t + 32, t + 38, nbytes=1000, phase="backward", bucket=1)
        p.mark(EVIL, 45)
        p.region(EVIL, 0, 50)
    return write_run(tmp_path_factory.mktemp("markup") / "run", procs, end_us=200)


def page_data(html: str) -> dict:
    m = re.search(r'<script id="commtrace-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def markup_html(markup_run, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("html") / "report.html")
    assert cli("report", markup_run, "--html", out, "-q") == 0
    with open(out, encoding="utf-8") as f:
        return out, f.read()


def test_escaping_path():
    import numpy as np
    from commtrace.render.html_escape import script_json, text
    assert text('<a href="x">&\'') == "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"
    js = script_json({"s": "</script><!--\u2028\u2029&", "n": [np.int32(3), np.float64("nan"), 1.5, True, None]})
    assert js == ('{"s":"\\u003c/script\\u003e\\u003c!--\\u2028\\u2029\\u0026",'
                  '"n":[3,null,1.5,true,null]}')
    assert json.loads(js) == {"s": "</script><!--\u2028\u2029&", "n": [3, None, 1.5, True, None]}


def test_page_is_self_contained(markup_html):
    _, html = markup_html
    markup = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)   # the page outside its scripts
    assert not re.search(r"""<[a-zA-Z][^>]*\s(src|href)\s*=""", markup)   # nothing to fetch (browser tests: no request)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert html.count('<script id="commtrace-data"') == 1 and "Plotly" in html


def test_trace_strings_are_escaped(markup_html):
    _, html = markup_html
    assert EVIL not in html
    assert "<script>window.__pwned" not in html and "<img" not in html
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=1" in html          # HTML text: the banner's hosts
    assert "\\u003c/script\\u003e\\u003cscript\\u003ewindow.__pwned=1" in html  # JSON in <script>
    data = re.search(r'<script id="commtrace-data"[^>]*>(.*?)</script>', html, re.S).group(1)
    assert "\u2028" not in data and "\\u2028" in data                  # a line end in old JavaScript


def views(html: str) -> dict:
    """The page's two views (steady steps, whole run): banner and sections of each."""
    parts = re.split(r'<div class="view-(steady|all)">', html)
    out = {"steady": "", "all": ""}
    for name, chunk in zip(parts[1::2], parts[2::2]):
        out[name] += chunk
    return out


def test_tables_are_the_terminal_tables(markup_run, markup_html, capsys):
    _, html = markup_html
    v = views(html)
    # The steady view is the report of steps 2.. (the set-up and step 1 left out); the other, the whole run.
    for name, args, steps in (("steady", ("--steps", "2:"), "Steps (1"), ("all", (), "Steps (2")):
        assert cli("report", markup_run, "--width", "250", *args) == 0
        term = capsys.readouterr().out
        captions = re.findall(r"<caption>(.*?)</caption>", v[name])
        assert "Per op" in captions and any(c.startswith(steps) for c in captions)
        for c in captions:   # every table of the view is one of the terminal's, titled alike
            assert c.replace("&#x27;", "'").replace("&quot;", '"') in term
    rep = analyse(markup_run, op_view=True)
    mean = fmt_ns(rep.by_op.loc["all_reduce", "mean_ns"])
    assert f'<td class="num">{mean}</td>' in v["all"] and mean in term
    assert "steps 2..last" in v["steady"] and "whole run" in v["all"]    # each banner names its window


def test_timeline_data_and_window(markup_run, markup_html, tmp_path):
    _, html = markup_html
    tl = page_data(html)["timeline"]
    assert tl["lanes"] == ["rank 0", "rank 1"]
    assert len(tl["ops"]["inst"]) == 2 * OPS_PER_RANK and not tl["aggregated"]
    assert len(tl["spans"]["fields"]["phase"]["c"]) == 2 * 6
    out = str(tmp_path / "step2.html")
    assert cli("report", markup_run, "--steps", "2", "--html", out, "-q") == 0   # the window applies
    with open(out, encoding="utf-8") as f:
        windowed = f.read()
    assert len(page_data(windowed)["timeline"]["ops"]["inst"]) == 2 * 3
    assert "steps 2" in windowed


def test_large_runs_are_aggregated(syn_run, tmp_path, monkeypatch):
    from commtrace.render import html_figures
    monkeypatch.setattr(html_figures, "TIMELINE_MAX_OPS", 100)
    out = str(tmp_path / "big.html")
    assert cli("report", syn_run, "--html", out, "-q") == 0
    with open(out, encoding="utf-8") as f:
        html = f.read()
    tl = page_data(html)["timeline"]
    assert tl["aggregated"] and tl["ops"] is None
    assert "are more than 100" in html and "--perfetto" in html
    metas = {t.get("meta") for t in tl["data"]}
    assert {"bins", "exposure", "spanbins"} <= metas            # ops, exposure and compute stay, binned
    lanes = {y for t in tl["data"] if t.get("meta") == "spanbins" for y in t["y"]}
    assert lanes == {f"rank {r} compute" for r in range(4)}
    assert all(t.get("name") for t in tl["data"] if t.get("meta") in ("bins", "exposure", "spanbins"))   # legend


def test_compare_html(markup_run, syn_run, tmp_path):
    out = str(tmp_path / "cmp.html")
    assert cli("compare", markup_run, syn_run, "--html", out) == 0
    with open(out, encoding="utf-8") as f:
        html = f.read()
    figures = {f["id"]: f["figure"] for f in page_data(html)["figures"]}
    assert list(figures) == ["compare-step", "compare-exposed", "compare-ops", "compare-bytes", "compare-busbw"]
    from commtrace.analysis.compare import compare_reports
    from commtrace.analysis.window import Window
    named = [(r, analyse(r, window=Window(), op_view=True)) for r in (markup_run, syn_run)]
    cmp = compare_reports(named, ["op"])
    ops = figures["compare-ops"]["data"][0]
    # ops per step: the medians of the compare table, one bar per run, the y axis from 0
    assert ops["y"] == [cmp["steps"].loc[(r, "ops")]["median"] for r in (markup_run, syn_run)]
    assert all(f["layout"]["yaxis"]["rangemode"] == "tozero" for f in figures.values())
    assert "<caption>Per step (median" in html
    assert 'class="num worse"' in html or 'class="num better"' in html   # changes beyond the noise, coloured


def test_unwritable_html_path_is_one_line_error(markup_run, tmp_path, capsys):
    assert cli("report", markup_run, "--html", str(tmp_path / "no" / "such" / "dir.html"), "-q") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("commtrace: error: --html")


# -- in a real browser -------------------------------------------------------------------

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="no Chromium installed (apt-get install -y "
                                    "chromium; .ci/run does): the HTML report's browser tests are skipped")

# The page's data, and the pixel centre of drawn op ``row`` (plotly's own axis conversions).
JS_OP_CENTRE = """(function (row) {
  var d = JSON.parse(document.getElementById('commtrace-data').textContent).timeline.ops;
  var gd = document.getElementById('timeline'), fl = gd._fullLayout, r = gd.getBoundingClientRect();
  return [r.left + fl._size.l + fl.xaxis.l2p(d.mid_ms[row]),
          r.top + fl._size.t + fl.yaxis.d2p(d.lane.k !== undefined ? d.lane.k : d.lane.v[d.lane.c[row]])];
})(%d)"""
JS_OP_SHAPES = """(function () {
  var gd = document.getElementById('timeline');
  var bars = gd.data.filter(function (t) { return t.type === 'bar'; });
  var groups = gd.querySelectorAll('.barlayer .trace'), n = 0;
  bars.forEach(function (t, i) { if (t.meta === 'ops') { n += groups[i].querySelectorAll('.point').length; } });
  return n;
})()"""
JS_LANES = """document.getElementById('timeline')._fullLayout.yaxis._categories
  .filter(function (c) { return /^rank \\d+$/.test(c); }).length"""
JS_LINK = """document.getElementById('timeline').data.filter(function (t) { return t.meta === 'link'; })[0].x.length"""


@pytest.fixture(scope="module")
def browser():
    if find_chromium() is None:
        pytest.skip("no Chromium installed")
    with Browser(timeout=90) as b:     # generous: the machine may be busy
        yield b


def load(browser, path):
    page = browser.open("file://" + os.path.abspath(path), offline=True)
    page.wait_for("document.body.getAttribute('data-ready') === '1'", timeout=90)
    return page


def marked_op_row(html):
    """The timeline row of step 2's all_reduce whose callsite is markup (the page opens on steps 2..)."""
    ops = page_data(html)["timeline"]["ops"]
    callsite = ops["fields"]["callsite"]
    marked = [i for i, c in enumerate(callsite["c"]) if c == callsite["v"].index(EVIL)]
    return max(marked, key=lambda i: ops["mid_ms"][i])


@needs_chromium
def test_markup_page_in_chromium(browser, markup_html, tmp_path):
    path, html = markup_html
    page = load(browser, path)
    assert page.problems() == []                        # no console errors, no network request
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate(JS_LANES) == 2                 # one lane per rank
    assert page.evaluate(JS_OP_SHAPES) == 2 * OPS_PER_RANK
    x, y = page.evaluate(JS_OP_CENTRE % marked_op_row(html))
    page.mouse("mouseMoved", x, y)
    tip = page.wait_for("document.getElementById('op-tip').style.display === 'block' && "
                        "document.getElementById('op-tip').innerText")
    for field in ("all_reduce on rank", "bytes", "3.9 KiB", "duration", "ms", "phase", "ranks in this call"):
        assert field in tip                             # a short hover, numbers formatted
    assert "callsite" not in tip and "dtype" not in tip
    assert page.wait_for(JS_LINK + " === 2")            # the same all_reduce on the other rank
    page.mouse("mousePressed", x, y)
    page.mouse("mouseReleased", x, y)
    detail = page.wait_for("document.getElementById('op-detail').innerText.indexOf('selected op') === 0 && "
                           "document.getElementById('op-detail').innerText")
    for field in ("all_reduce", "callsite", "seq", "group", "dtype", "3.9 KiB"):   # every field on click
        assert field in detail
    assert "</script><script>window.__pwned=1</script>" in detail     # shown as text
    shot = page.screenshot(str(tmp_path / "report.png"), full_page=True)
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.problems() == []


@needs_chromium
@pytest.mark.parametrize("hold_ms", [30, 45, 60])
def test_a_quick_click_after_the_hover_is_not_lost(browser, markup_html, hold_ms):
    # The hover redraws the cross-rank link; Plotly then re-hovers 50 ms later, and a re-hover that
    # lands while the button is down made Plotly drop the click (holds of 40-55 ms lost it).
    path, html = markup_html
    page = load(browser, path)
    x, y = page.evaluate(JS_OP_CENTRE % marked_op_row(html))
    page.mouse("mouseMoved", x, y)
    page.mouse("mousePressed", x, y)
    page.evaluate("new Promise(function (done) { setTimeout(done, %d); })" % hold_ms)
    page.mouse("mouseReleased", x, y)
    detail = page.wait_for("document.getElementById('op-detail').innerText.indexOf('selected op') === 0 && "
                           "document.getElementById('op-detail').innerText")
    assert "callsite" in detail and "seq" in detail
    assert page.problems() == []


@needs_chromium
def test_tables_sort_in_chromium(browser, markup_html):
    page = load(browser, markup_html[0])
    js_first = ("(function(){var t=[].filter.call(document.querySelectorAll('table.sortable'),function(t){"
                "return t.caption && t.caption.textContent==='Per op';})[0];var h=[].filter.call(t.tHead.rows[0]"
                ".cells,function(c){return c.textContent==='mean';})[0];h.click();return [h.getAttribute('data-sort'),"
                "t.tBodies[0].rows[0].cells[0].textContent];})()")
    order, first = page.evaluate(js_first)
    assert order == "asc" and first == "broadcast"      # 2 us < 6.5 / 10.75 us (all_reduce mean)
    assert page.problems() == []


@needs_chromium
def test_real_run_page_in_chromium(browser, real_run, tmp_path):
    out = str(tmp_path / "real.html")
    assert cli("report", real_run, "--html", out, "-q") == 0
    page = load(browser, out)
    assert page.problems() == []
    rep = analyse(real_run, op_view=True)
    assert page.evaluate(JS_LANES) == rep.info["ranks"] == 2
    assert page.evaluate(JS_OP_SHAPES) == len(rep.op_view.frame)
    page.screenshot(str(tmp_path / "real.png"), full_page=True)


@needs_chromium
def test_compare_page_in_chromium(browser, markup_run, syn_run, tmp_path):
    out = str(tmp_path / "cmp.html")
    assert cli("compare", markup_run, syn_run, "--html", out) == 0
    page = load(browser, out)
    assert page.problems() == []
    for fid in ("compare-step", "compare-exposed", "compare-ops", "compare-bytes", "compare-busbw"):
        assert page.evaluate(f"document.querySelectorAll('#{fid} .barlayer .point').length") == 2   # a bar per run
        assert page.evaluate(f"document.getElementById('{fid}')._fullLayout.yaxis.range[0]") == 0
    assert page.evaluate("document.querySelectorAll('td.better, td.worse').length") > 0
    colour = page.evaluate("getComputedStyle(document.querySelector('td.better, td.worse')).color")
    assert colour in ("rgb(46, 125, 50)", "rgb(198, 40, 40)")


# -- what the page shows by default, and how ---------------------------------------------

def test_timeline_marks_steps_and_opens_on_the_steady_steps(markup_run, markup_html):
    tl = page_data(markup_html[1])["timeline"]
    rep = analyse(markup_run, op_view=True)
    t0 = rep.info["t0_ns"]
    begins = rep.steps.per_rank.groupby("step")["t_begin_ns"].min()
    lines = [sh["x0"] for sh in tl["layout"]["shapes"]]
    assert lines == pytest.approx([(begins[s] - t0) / 1e6 for s in (1, 2)])       # a line where each step begins
    assert [a["text"] for a in tl["layout"]["annotations"]] == ["step 1", "step 2"]
    lo, hi = tl["layout"]["meta"]["steady"]
    assert tl["layout"]["xaxis"]["range"] == [lo, hi]
    end = (rep.steps.per_rank["t_end_ns"].max() - t0) / 1e6
    assert lo < (begins[2] - t0) / 1e6 < lo + 0.05 * (hi - lo) and hi > end     # steps 2.. and nothing before


def test_timeline_exposure_strips_add_up_to_the_step_table(markup_run, markup_html):
    tl = page_data(markup_html[1])["timeline"]
    rep = analyse(markup_run, op_view=True)
    t0 = rep.info["t0_ns"]
    strips = [t for t in tl["data"] if t.get("meta") == "exposure"]
    assert sorted(t["name"] for t in strips) == ["exposed comm", "hidden comm"]
    for t in strips:
        assert t["marker"]["color"] == {"exposed comm": "#e53935", "hidden comm": "#66bb6a"}[t["name"]]
    exposed = next(t for t in strips if t["name"] == "exposed comm")
    for _, row in rep.steps.per_rank.iterrows():   # per (rank, step): the strip's red = the table's exposed
        b, e = (row["t_begin_ns"] - t0) / 1e6, (row["t_end_ns"] - t0) / 1e6
        total = sum(max(0.0, min(x0 + w, e) - max(x0, b)) for x0, w, lane in
                    zip(exposed["base"], exposed["x"], exposed["y"]) if lane == f"rank {row['rank']}")
        assert total == pytest.approx(row["exposed_ns"] / 1e6, abs=1e-3)
    phases = {t["name"]: t["marker"]["color"] for t in tl["data"] if t.get("meta") == "spans"}
    assert len(set(phases.values())) == 3 and set(phases) == {"forward (compute)", "backward (compute)",
                                                              "optimizer (compute)"}


def test_op_fields_are_formatted(markup_html):
    fields = page_data(markup_html[1])["timeline"]["ops"]["fields"]
    assert set(fields["bytes"]["v"]) == {"8 B", "3.9 KiB", "1000 B"}
    assert "params" not in fields                     # no op has a value: not sent


@pytest.fixture(scope="module")
def gpu_like_run(tmp_path_factory):
    """1 rank, a 280 ms set-up op (NCCL's first collective), observed end times (gloo on CUDA)."""
    from synthetic import write_synthetic_run
    return write_synthetic_run(str(tmp_path_factory.mktemp("gpu") / "run"), ranks=1, ops_per_rank=50, seed=3,
                               setup_ns=280e6, end_observed=True)


def test_gpu_like_page_leaves_set_up_out_and_flags_bandwidth(gpu_like_run, tmp_path):
    out = str(tmp_path / "gpu.html")
    assert cli("report", gpu_like_run, "--html", out, "-q") == 0
    with open(out, encoding="utf-8") as f:
        html = f.read()
    data = page_data(html)
    figures = {f["id"]: f["figure"] for f in data["figures"]}
    steady = figures["steps-chart-steady"]["data"][0]["x"][0]
    whole = figures["steps-chart-all"]["data"][0]["x"][0]
    assert "step 1" not in steady and "step 1" in whole and "step 2" in steady
    assert data["timeline"]["layout"]["meta"]["steady"][0] > 280        # opens after the 280 ms set-up op
    bw = figures["bandwidth-steady"]["data"]
    assert bw and all(t["mode"] == "markers" for t in bw)             # no lines across sizes
    assert all("1-rank group: nothing moves" in t["name"] for t in bw)
    assert "move no data" in html
    assert 'id="show-setup"' in html and "Steady state" in html


def test_observed_end_times_are_flagged(tmp_path):
    from synthetic import write_synthetic_run
    run = write_synthetic_run(str(tmp_path / "run"), ranks=2, ops_per_rank=40, seed=1, end_observed=True)
    out = str(tmp_path / "obs.html")
    assert cli("report", run, "--html", out, "-q") == 0
    with open(out, encoding="utf-8") as f:
        html = f.read()
    bw = {f["id"]: f["figure"] for f in page_data(html)["figures"]}["bandwidth-steady"]
    assert all("end observed: upper bound" in t["name"] for t in bw["data"])
    assert "durations are upper bounds" in html


def test_many_ranks_per_step_is_a_mean_with_min_max(tmp_path):
    from synthetic import write_synthetic_run
    run = write_synthetic_run(str(tmp_path / "run"), ranks=8, ops_per_rank=40, seed=1, slow_rank=1)
    out = str(tmp_path / "r8.html")
    assert cli("report", run, "--html", out, "-q") == 0
    with open(out, encoding="utf-8") as f:
        html = f.read()
    fig = {f["id"]: f["figure"] for f in page_data(html)["figures"]}["steps-chart-steady"]
    rep = analyse(run, op_view=True)
    per = rep.steps.per_rank
    steps = sorted(int(s) for s in per["step"].unique())[1:]          # the steady steps
    bars = fig["data"][:4]
    assert all(t["x"] == steps for t in bars)                           # one bar per step, not per rank
    whisker = fig["data"][4]
    s = steps[0]
    top = sum(t["y"][0] for t in bars)
    assert top - whisker["error_y"]["arrayminus"][0] == pytest.approx(per[per["step"] == s]["step_ns"].min() / 1e6,
                                                                       abs=1e-5)
    assert top + whisker["error_y"]["array"][0] == pytest.approx(per[per["step"] == s]["step_ns"].max() / 1e6,
                                                                  abs=1e-5)


def test_page_is_light(markup_html):
    # the partial plotly bundle (bar and scatter: 1.2 MB) instead of plotly.min.js (4.8 MB)
    assert len(markup_html[1].encode("utf-8")) < 1.5e6
    assert "plotly.js (basic - minified)" in markup_html[1]


JS_VIEW = "document.body.getAttribute('data-view')"
JS_RANGE = "document.getElementById('timeline')._fullLayout.xaxis.range.slice()"
JS_DRAWN = "!!document.getElementById('%s').getAttribute('data-drawn')"


@needs_chromium
def test_steady_state_by_default_and_the_toggle_in_chromium(browser, markup_html):
    path, html = markup_html
    page = load(browser, path)
    steady = page_data(html)["timeline"]["layout"]["meta"]["steady"]
    assert page.evaluate(JS_VIEW) == "steady"
    assert page.evaluate(JS_RANGE) == pytest.approx(steady)                 # the timeline opens on steps 2..
    assert page.evaluate("document.getElementById('steps-chart-steady').offsetHeight") > 0
    assert page.evaluate("document.getElementById('steps-chart-all').offsetHeight") == 0    # hidden
    assert page.evaluate(JS_DRAWN % "steps-chart-steady") and not page.evaluate(JS_DRAWN % "steps-chart-all")
    page.evaluate("document.getElementById('show-setup').click()")
    assert page.wait_for(JS_VIEW + " === 'all'")
    assert page.wait_for(JS_DRAWN % "steps-chart-all")
    assert page.evaluate("document.getElementById('steps-chart-all').offsetHeight") > 0
    assert page.wait_for(JS_RANGE + "[0] <= 0")                             # the whole run, set-up included
    page.evaluate("document.getElementById('show-setup').click()")
    assert page.wait_for(JS_VIEW + " === 'steady'")
    assert page.evaluate(JS_RANGE) == pytest.approx(steady)
    assert page.problems() == []


@needs_chromium
def test_timeline_draws_steps_exposure_and_legend_in_chromium(browser, markup_html):
    path, html = markup_html
    page = load(browser, path)
    tl = page_data(html)["timeline"]
    strips = sum(len(t["base"]) for t in tl["data"] if t.get("meta") == "exposure")
    js = """(function () {
      var gd = document.getElementById('timeline');
      var bars = gd.data.filter(function (t) { return t.type === 'bar'; });
      var groups = gd.querySelectorAll('.barlayer .trace'), n = 0;
      bars.forEach(function (t, i) {
        if (t.meta === 'exposure') { n += groups[i].querySelectorAll('.point').length; } });
      return n; })()"""
    assert strips > 0 and page.evaluate(js) == strips                       # every strip is drawn
    assert page.evaluate("document.querySelectorAll('#timeline .shapelayer path').length") >= 2   # step lines
    labels = page.evaluate("[].map.call(document.querySelectorAll('#timeline .annotation-text'),"
                           "function (a) { return a.textContent; })")
    assert labels == ["step 2"]                 # step 1 lies before the steady range the timeline opens on
    legend = page.evaluate("[].map.call(document.querySelectorAll('#timeline .legendtext'),"
                           "function (a) { return a.textContent; })")
    for name in ("exposed comm", "hidden comm", "forward (compute)", "backward (compute)", "all_reduce"):
        assert name in legend
    assert page.problems() == []


def test_many_exposure_intervals_are_binned(syn_run, tmp_path, monkeypatch):
    from commtrace.render import html_figures
    monkeypatch.setattr(html_figures, "TIMELINE_MAX_STRIPS", 10)
    out = str(tmp_path / "strips.html")
    assert cli("report", syn_run, "--html", out, "-q") == 0
    with open(out, encoding="utf-8") as f:
        html = f.read()
    tl = page_data(html)["timeline"]
    assert not tl["aggregated"] and tl["ops"] is not None               # every op still drawn
    strips = [t for t in tl["data"] if t.get("meta") == "exposure"]
    assert strips and all("mostly" in t["hovertemplate"] for t in strips)
    assert sum(len(t["base"]) for t in strips) <= 4 * html_figures.timeline_bins(4)
    assert "are more than 10: the strip along the ops is binned" in html


def test_mean_form_keeps_the_slowest_steps(tmp_path, monkeypatch):
    from commtrace.render import html_figures
    from synthetic import write_synthetic_run
    monkeypatch.setattr(html_figures, "STEP_MAX_MEAN_STEPS", 3)
    run = write_synthetic_run(str(tmp_path / "run"), ranks=6, ops_per_rank=60, seed=2)
    rep = analyse(run, op_view=True)
    fig = html_figures.steps_figure(rep)
    slowest = sorted(int(s) for s in rep.steps.across["step_ns"].nlargest(3).index)
    assert fig["data"][0]["x"] == slowest and f"the 3 slowest of {len(rep.steps.across)} steps" in fig["note"]
