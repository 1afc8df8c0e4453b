// commtrace HTML report: draws the figures (plotly.js's partial "basic" bundle, inlined above), shows an
// op's fields on hover/click, links a collective across ranks, sorts tables.
// Trace strings only ever reach the DOM through textContent.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("commtrace-data").textContent);
  var CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["toImage"]};

  function draw(id, fig) {
    var el = document.getElementById(id);
    if (!el || !fig) { return null; }
    Plotly.newPlot(el, fig.data, fig.layout, CONFIG);
    el.setAttribute("data-drawn", "1");
    return el;
  }

  // -- steady state / whole run: figures of the hidden view are drawn when first shown
  // (plotly cannot size a figure inside display:none).
  var STEADY = document.getElementById("show-setup") !== null;

  function currentView() { return document.body.getAttribute("data-view"); }

  function drawView() {
    (DATA.figures || []).forEach(function (f) {
      var el = document.getElementById(f.id);
      if (el && !el.getAttribute("data-drawn") && (!f.view || f.view === currentView())) { draw(f.id, f.figure); }
    });
  }

  function setView(all) {
    document.body.setAttribute("data-view", all ? "all" : "steady");
    drawView();
    var gd = document.getElementById("timeline");
    var steady = tl && tl.layout.meta && tl.layout.meta.steady;
    if (gd && gd.getAttribute("data-drawn") && steady) {
      Plotly.relayout(gd, all ? {"xaxis.autorange": true} : {"xaxis.range": steady.slice()});
    }
  }

  // -- op details and the cross-rank link ------------------------------------
  var tl = DATA.timeline;
  var byInst = null;   // instance -> op rows, built on first use

  function rowsOf(inst) {
    if (byInst === null) {
      byInst = new Map();
      var ids = tl.ops.inst;
      for (var i = 0; i < ids.length; i++) {
        var list = byInst.get(ids[i]);
        if (list) { list.push(i); } else { byInst.set(ids[i], [i]); }
      }
    }
    return byInst.get(inst) || [];
  }

  // A field: {"k": one value for all}, {"n": [numbers]} or {"v": distinct strings, "c": codes (-1: missing)}.
  function valueOf(f, i) {
    if (f.k !== undefined) { return f.k; }
    if (f.c) { var k = f.c[i]; return k < 0 ? null : f.v[k]; }
    return f.n[i];
  }

  function showFields(box, title, pairs) {
    box.textContent = "";
    var h = document.createElement("div");
    h.className = "detail-title";
    h.textContent = title;
    box.appendChild(h);
    var dl = document.createElement("dl");
    pairs.forEach(function (p) {
      var dt = document.createElement("dt"); dt.textContent = p[0];
      var dd = document.createElement("dd"); dd.textContent = p[1];
      dl.appendChild(dt); dl.appendChild(dd);
    });
    box.appendChild(dl);
  }

  function linkIndex(gd) {
    for (var i = 0; i < gd.data.length; i++) { if (gd.data[i].meta === "link") { return i; } }
    return -1;
  }

  // The hover's few fields, formatted on the Python side (bytes) or here (ms).
  var SHORT = ["bytes", "duration (ms)", "phase", "bucket", "iteration", "group_size"];

  function fmtValue(name, v) {
    if (typeof v === "number" && /\(ms\)$/.test(name)) { return v.toFixed(3) + " ms"; }
    if (typeof v === "number" && Math.abs(v) >= 10000) { return v.toLocaleString("en-US"); }
    return String(v);
  }

  function fieldsOf(table, i, only) {
    var out = [];
    var names = only || Object.keys(table.fields);
    for (var k = 0; k < names.length; k++) {
      var f = table.fields[names[k]];
      var v = f ? valueOf(f, i) : null;
      if (v !== null && v !== undefined && v !== "") {
        out.push([names[k].replace(" (ms)", ""), fmtValue(names[k], v)]);
      }
    }
    return out;
  }

  function describe(gd, pt, full) {
    var kind = gd.data[pt.curveNumber].meta;
    if (kind === "ops" && tl.ops) {
      var row = pt.customdata;
      var same = rowsOf(tl.ops.inst[row]);
      var pairs = fieldsOf(tl.ops, row, full ? null : SHORT);
      pairs.push(["ranks in this call", String(same.length)]);
      var title = valueOf(tl.ops.fields.op, row) + " on rank " + valueOf(tl.ops.fields.rank, row);
      return {title: full ? "op: " + title : title + " (click: every field)", pairs: pairs, link: same};
    }
    if (kind === "spans" && tl.spans) {
      return {title: "compute span", pairs: fieldsOf(tl.spans, pt.customdata, null), link: []};
    }
    return null;
  }

  function setLink(gd, rows) {
    var li = linkIndex(gd);
    if (li < 0) { return; }
    var pts = rows.map(function (r) { return [valueOf(tl.ops.lane, r), tl.ops.mid_ms[r]]; });
    pts.sort(function (a, b) { return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0; });
    // Plotly re-runs its hover 50 ms after every redraw; when that lands while the mouse button is
    // down, it forgets the point under the pointer and drops the click (a quick hover-then-click lost
    // the op's detail). The link needs no re-hover, and the next mouse move sets a new one up.
    gd._fullLayout._rehover = null;
    Plotly.restyle(gd, {x: [pts.map(function (p) { return p[1]; })], y: [pts.map(function (p) { return p[0]; })]},
                   [li]);
  }

  function setupTimeline() {
    var gd = draw("timeline", tl);
    if (!gd) { return; }
    var tip = document.getElementById("op-tip");
    var detail = document.getElementById("op-detail");
    var linked = null;
    gd.on("plotly_hover", function (ev) {
      var pt = ev.points && ev.points[0];
      var d = pt && describe(gd, pt, false);
      if (!d) { return; }
      showFields(tip, d.title, d.pairs);
      tip.style.display = "block";
      var e = ev.event || {};
      tip.style.left = Math.min((e.pageX || 0) + 14, window.innerWidth + window.scrollX - 380) + "px";
      tip.style.top = ((e.pageY || 0) + 14) + "px";
      if (d.link.length > 1) { linked = d.link; setLink(gd, d.link); }
    });
    gd.on("plotly_unhover", function () { tip.style.display = "none"; });
    gd.on("plotly_click", function (ev) {
      var pt = ev.points && ev.points[0];
      var d = pt && describe(gd, pt, true);
      if (!d) { return; }
      showFields(detail, "selected " + d.title, d.pairs);
      setLink(gd, d.link.length > 1 ? d.link : []);
    });
  }

  // -- sortable tables ---------------------------------------------------------
  var UNITS = {ns: 1e-9, us: 1e-6, "\u00b5s": 1e-6, ms: 1e-3, s: 1, min: 60, B: 1, KiB: 1024, MiB: 1048576,
               GiB: 1073741824, TiB: 1099511627776, PiB: 1125899906842624, "kB/s": 1e3, "MB/s": 1e6,
               "GB/s": 1e9, "%": 0.01};

  function sortKey(s) {
    var m = /^\(?\s*([-+]?[0-9][0-9,]*\.?[0-9]*)\s*([a-zA-Z\u00b5%/]*)/.exec(s.trim());
    if (!m) { return null; }
    var v = parseFloat(m[1].replace(/,/g, ""));
    var u = UNITS[m[2]];
    return u === undefined ? (m[2] ? null : v) : v * u;
  }

  function makeSortable(table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        var asc = th.getAttribute("data-sort") !== "asc";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("data-sort"); });
        th.setAttribute("data-sort", asc ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col] ? a.cells[col].textContent : "", y = b.cells[col] ? b.cells[col].textContent : "";
          var kx = sortKey(x), ky = sortKey(y), c;
          if (kx !== null && ky !== null) { c = kx - ky; }
          else if (kx !== null) { c = -1; } else if (ky !== null) { c = 1; }
          else { c = x.localeCompare(y); }
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  if (STEADY) {
    document.body.setAttribute("data-view", "steady");
    document.getElementById("show-setup").checked = false;
    document.getElementById("show-setup").addEventListener("change", function (ev) { setView(ev.target.checked); });
  }
  setupTimeline();
  drawView();
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), makeSortable);
  document.body.setAttribute("data-ready", "1");
})();
