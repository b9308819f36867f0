// otel-profiler HTML report: the canvas timeline (inlined after report.js, whose helpers it uses;
// report.js's page code starts it when the Timeline tab opens).
"use strict";

// ------------------------------------------------------------------ timeline
const Timeline = (() => {
  const T = DATA.timeline;
  const n = T.count;
  const track = b64(T.columns.track, Uint32Array), start = b64(T.columns.start, Float64Array);
  const dur = T.dur_type === "f64" ? b64(T.columns.dur, Float64Array) : b64(T.columns.dur, Uint32Array);
  const name = b64(T.columns.name, Uint32Array), kind = b64(T.columns.kind, Uint8Array);
  const flowSrc = b64(T.columns.flow_src, Uint32Array), flowDst = b64(T.columns.flow_dst, Uint32Array);
  const ROW = 16, HEAD = 18, GROUP = 20, AXIS = 22, LABEL_W = 250;

  // Nesting depth per event (events are sorted by track, start, longest first), then rows per
  // (track, depth): within a row events never overlap, so starts and ends are both sorted.
  const depth = new Uint16Array(n), rowsOf = T.tracks.map(() => []);
  {
    const stack = [];
    let cur = -1;
    for (let i = 0; i < n; i++) {
      if (track[i] !== cur) { cur = track[i]; stack.length = 0; }
      const s = start[i];
      while (stack.length && start[stack[stack.length - 1]] + dur[stack[stack.length - 1]] <= s) stack.pop();
      depth[i] = stack.length; stack.push(i);
    }
    const counts = T.tracks.map(() => []);
    for (let i = 0; i < n; i++) { const c = counts[track[i]]; c[depth[i]] = (c[depth[i]] || 0) + 1; }
    counts.forEach((c, t) => { for (let d = 0; d < c.length; d++) rowsOf[t].push(new Uint32Array(c[d] || 0)); });
    const fill = T.tracks.map(() => []);
    for (let i = 0; i < n; i++) { const t = track[i], d = depth[i]; const f = fill[t]; f[d] = (f[d] || 0); rowsOf[t][d][f[d]++] = i; }
  }
  // Vertical layout: a group heading per rank, a header line per track, one row per shown depth.
  // A collapsed track shows only its outermost events (CPU threads, deep annotation stacks, until
  // a click on the track's label opens it): the first screen shows the GPU streams.
  const collapsed = T.tracks.map((tr, t) => !!tr.collapsed || (tr.kind === "annotations" && rowsOf[t].length > 4));
  const layout = [];  // per track: {track, y, rows (shown), depth (all)}
  const groupAt = [];
  let totalHeight = 0;
  function relayout() {
    let height = AXIS, lastGroup = null;
    layout.length = 0; groupAt.length = 0;
    T.tracks.forEach((tr, t) => {
      if (tr.group !== lastGroup) { groupAt.push({y: height, label: tr.group}); height += GROUP; lastGroup = tr.group; }
      const all = rowsOf[t].length, rows = collapsed[t] ? Math.min(1, all) : all;
      layout.push({track: t, y: height + HEAD, rows, depth: all});
      height += HEAD + Math.max(1, rows) * ROW + 4;
    });
    totalHeight = height;
  }
  relayout();
  function toggle(t, open) {
    collapsed[t] = open === undefined ? !collapsed[t] : !open;
    relayout(); view.scrollY = Math.min(view.scrollY, Math.max(0, totalHeight - H + ROW)); draw();
  }
  function trackAt(y) {  // the track whose header or rows are at canvas y
    const yy = y + view.scrollY;
    for (const L of layout) if (yy >= L.y - HEAD && yy < L.y + Math.max(1, L.rows) * ROW + 4) return L.track;
    return -1;
  }
  function fit(c, text, width) {  // text cut with … to fit width pixels
    if (c.measureText(text).width <= width) return text;
    let lo = 0, hi = text.length;
    while (lo < hi) { const m = (lo + hi + 1) >> 1; if (c.measureText(text.slice(0, m) + "…").width <= width) lo = m; else hi = m - 1; }
    return text.slice(0, lo) + "…";
  }
  let tEnd = 0;
  for (let i = 0; i < n; i++) tEnd = Math.max(tEnd, start[i] + dur[i]);
  tEnd = Math.max(tEnd, 1);
  const kindColor = {sync: "#d64545", memcpy: "#e8a13a", memset: "#c9833e", runtime: "#7d8797", driver: "#7d8797", step: "#3aa876", user_annotation: "#8e6bd1", gpu_user_annotation: "#8e6bd1"};
  const nameColor = T.strings.map(s => hashColor(s));

  // Opens on T.initial_view (the first step with GPU work, or the busiest second); "Zoom to all"
  // shows everything.
  const opening = T.initial_view || {t0: 0, t1: tEnd * 1.01};
  const view = {t0: opening.t0, t1: opening.t1 > opening.t0 ? opening.t1 : tEnd * 1.01, scrollY: 0, selected: -1};
  let canvas, ctx, W = 0, H = 0, dpr = 1;

  const xOf = t => LABEL_W + (t - view.t0) * (W - LABEL_W) / (view.t1 - view.t0);
  const tOf = x => view.t0 + (x - LABEL_W) * (view.t1 - view.t0) / (W - LABEL_W);
  function lowerEnd(row, t) {  // first index in row whose end > t
    let lo = 0, hi = row.length;
    while (lo < hi) { const m = (lo + hi) >> 1, i = row[m]; if (start[i] + dur[i] > t) hi = m; else lo = m + 1; }
    return lo;
  }
  function lowerStart(row, t) {  // first index in row whose start >= t
    let lo = 0, hi = row.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (start[row[m]] >= t) hi = m; else lo = m + 1; }
    return lo;
  }
  function colorOf(i) { return kindColor[T.kinds[kind[i]]] || nameColor[name[i]]; }
  // An event inside a collapsed track is drawn at (and its arrows reach) the track's last shown row.
  function yOfEvent(i) { const L = layout[track[i]]; return L.y + Math.min(depth[i], Math.max(0, L.rows - 1)) * ROW - view.scrollY; }

  let drawn = 0;
  function draw() {
    const c = ctx;
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    c.fillStyle = "#fff"; c.fillRect(0, 0, W, H);
    c.font = "11px system-ui, sans-serif"; c.textBaseline = "middle";
    const px = (view.t1 - view.t0) / (W - LABEL_W);  // ns per pixel
    drawn = 0;
    for (const L of layout) {
      const top = L.y - HEAD - view.scrollY, bottom = L.y + L.rows * ROW - view.scrollY;
      if (bottom < AXIS || top > H) continue;
      const rows = rowsOf[L.track];
      for (let d = 0; d < L.rows; d++) {
        const y = L.y + d * ROW - view.scrollY;
        if (y + ROW < AXIS || y > H) continue;
        const row = rows[d];
        let k = lowerEnd(row, view.t0);
        while (k < row.length) {
          const i = row[k], s = start[i];
          if (s > view.t1) break;
          const x0 = xOf(s), x1 = xOf(s + dur[i]);
          const xa = Math.max(LABEL_W, x0), w = Math.min(W, x1) - xa;
          c.fillStyle = colorOf(i);
          if (w < 1) {
            // Level of detail: one 1-px mark per pixel column, then skip what it covers.
            c.fillRect(Math.floor(xa), y + 1, 1, ROW - 2); drawn++;
            const next = tOf(Math.floor(xa) + 1);
            const j = lowerStart(row, next);
            k = j > k ? j : k + 1;
            continue;
          }
          c.fillRect(xa, y + 1, w, ROW - 2); drawn++;
          if (w > 30) {
            c.save(); c.beginPath(); c.rect(xa, y, w, ROW); c.clip();
            c.fillStyle = "#fff"; c.fillText(fit(c, T.short[name[i]], w - 5), xa + 3, y + ROW / 2);
            c.restore();
          }
          k++;
        }
      }
    }
    if (view.selected >= 0) {
      const i = view.selected, y = yOfEvent(i);
      c.strokeStyle = "#000"; c.lineWidth = 2;
      c.strokeRect(Math.max(LABEL_W, xOf(start[i])) - 1, y, Math.max(2, xOf(start[i] + dur[i]) - xOf(start[i])) + 2, ROW);
    }
    drawFlows(c);
    // Labels column and headings.
    c.fillStyle = "#f6f7fa"; c.fillRect(0, AXIS, LABEL_W, H);
    for (const g of groupAt) {
      const y = g.y - view.scrollY;
      if (y < AXIS - GROUP || y > H) continue;
      c.fillStyle = "#1d2330"; c.fillRect(0, y, W, GROUP - 2);
      c.fillStyle = "#fff"; c.font = "bold 12px system-ui, sans-serif"; c.fillText(g.label, 6, y + GROUP / 2);
    }
    c.font = "11px system-ui, sans-serif";
    for (const L of layout) {
      const y = L.y - HEAD - view.scrollY;
      if (y < AXIS - HEAD || y > H) continue;
      c.fillStyle = "#edf0f5"; c.fillRect(0, y, W, 1);
      const more = L.depth > 1 ? (collapsed[L.track] ? "▸ " : "▾ ") : "  ";
      const hidden = L.depth - L.rows;
      c.fillStyle = "#1d2330";
      const left = T.tracks[L.track].left_out ? ` [${fmtNum(T.tracks[L.track].left_out)} left out]` : "";
      c.fillText(fit(c, more + T.tracks[L.track].label + (hidden > 0 ? ` (+${hidden} levels)` : "") + left, LABEL_W - 10), 4, y + HEAD / 2);
    }
    drawAxis(c);
    document.getElementById("tl-range").textContent = `${fmtUs((view.t1 - view.t0) / 1e3)} visible · ${fmtNum(n)} events` +
      (T.total > n ? ` of ${fmtNum(T.total)}` : "");
    canvas.setAttribute("data-view", `${view.t0},${view.t1}`);
    canvas.setAttribute("data-drawn", String(drawn));
  }
  function drawWindows(c, labels) {  // a live run's detailed windows: shaded along the axis, named on top
    let shown = 0;
    for (const w of T.windows || []) {
      const x0 = Math.max(LABEL_W, xOf(w.t0)), x1 = Math.min(W, xOf(w.t1));
      if (x1 <= x0) continue;
      shown++;
      if (!labels) { c.fillStyle = "rgba(58,168,118,0.25)"; c.fillRect(x0, 0, Math.max(2, x1 - x0), AXIS); continue; }
      const text = fit(c, w.label, x1 - x0 - 6);
      if (!text) continue;
      c.fillStyle = "#e3f4ec"; c.fillRect(x0 + 1, 2, c.measureText(text).width + 5, AXIS - 8);
      c.fillStyle = "#1f6b4a"; c.fillText(text, x0 + 3, (AXIS - 4) / 2);
    }
    return shown;
  }
  function drawAxis(c) {
    c.fillStyle = "#fff"; c.fillRect(0, 0, W, AXIS);
    canvas.setAttribute("data-windows", String(drawWindows(c, false)));
    c.strokeStyle = "#d9dee7"; c.fillStyle = "#667085";
    const span = view.t1 - view.t0, target = span / 8;
    const step = Math.pow(10, Math.floor(Math.log10(target))) * [1, 2, 5, 10].find(m => Math.pow(10, Math.floor(Math.log10(target))) * m >= target);
    for (let t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
      const x = xOf(t);
      c.beginPath(); c.moveTo(x, AXIS - 6); c.lineTo(x, AXIS); c.stroke();
      c.fillText(fmtUs(t / 1e3), x + 2, AXIS / 2);
    }
    c.beginPath(); c.moveTo(0, AXIS); c.lineTo(W, AXIS); c.stroke();
    drawWindows(c, true);
  }
  function lowerFlow(t) {  // first flow whose GPU op starts at or after t (flows sorted by dst start)
    let lo = 0, hi = flowOrder.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (start[flowDst[flowOrder[m]]] >= t) hi = m; else lo = m + 1; }
    return lo;
  }
  const flowOrder = Array.from(flowDst.keys()).sort((a, b) => start[flowDst[a]] - start[flowDst[b]]);
  function arrow(c, i, j) {
    const x0 = xOf(start[i]), y0 = yOfEvent(i) + ROW / 2, x1 = xOf(start[j]), y1 = yOfEvent(j) + ROW / 2;
    c.beginPath(); c.moveTo(x0, y0); c.bezierCurveTo(x0 + 20, y0, x1 - 20, y1, x1, y1); c.stroke();
    c.beginPath(); c.moveTo(x1, y1); c.lineTo(x1 - 6, y1 - 3); c.lineTo(x1 - 6, y1 + 3); c.closePath(); c.fill();
  }
  function drawFlows(c) {
    c.lineWidth = 1;
    if (document.getElementById("tl-flows").checked) {
      const a = lowerFlow(view.t0), b = lowerFlow(view.t1);
      if (b - a <= 1500) {
        c.strokeStyle = "rgba(29,35,48,0.45)"; c.fillStyle = "rgba(29,35,48,0.6)";
        const all = b - a <= 200;  // from folded levels too once few enough are in view
        for (let k = a; k < b; k++) {
          const src = flowSrc[flowOrder[k]];
          if (all || depth[src] < layout[track[src]].rows) arrow(c, src, flowDst[flowOrder[k]]);
        }
      }
    }
    if (view.selected >= 0) {
      c.strokeStyle = "#d64545"; c.fillStyle = "#d64545"; c.lineWidth = 2;
      for (const [s, d] of linksOf(view.selected)) arrow(c, s, d);
    }
  }
  function linksOf(i) {
    const out = [];
    for (let k = 0; k < flowSrc.length; k++) if (flowSrc[k] === i || flowDst[k] === i) out.push([flowSrc[k], flowDst[k]]);
    return out;
  }
  function hit(x, y) {
    if (x < LABEL_W || y < AXIS) return -1;
    const yy = y + view.scrollY, t = tOf(x), tol = 3 * (view.t1 - view.t0) / (W - LABEL_W);
    for (const L of layout) {
      if (yy < L.y || yy >= L.y + L.rows * ROW) continue;  // rows of a collapsed track beyond the first are not shown
      const row = rowsOf[L.track][Math.floor((yy - L.y) / ROW)];
      let best = -1, bestDist = Infinity;
      for (let k = Math.max(0, lowerEnd(row, t - tol)); k < row.length && start[row[k]] <= t + tol; k++) {
        const i = row[k], dist = t < start[i] ? start[i] - t : (t > start[i] + dur[i] ? t - start[i] - dur[i] : 0);
        if (dist < bestDist) { best = i; bestDist = dist; }
      }
      return best;
    }
    return -1;
  }
  function select(i) {
    view.selected = i;
    const box = document.getElementById("tl-details");
    if (i < 0) { box.replaceChildren(el("em", {text: "Click an event for details."})); draw(); return; }
    const tr = T.tracks[track[i]];
    const dl = el("dl", {id: "tl-selected", "data-index": String(i)});
    const add = (k, v) => dl.append(el("dt", {text: k}), el("dd", {}, v));
    add("name", T.strings[name[i]]);
    if (T.raw[name[i]]) add("recorded as", T.raw[name[i]]);
    add("kind", T.kinds[kind[i]]);
    add("track", `${tr.group} / ${tr.label}`);
    add("start", fmtUs(start[i] / 1e3) + " from profile start");
    add("duration", fmtUs(dur[i] / 1e3));
    for (const [s, d] of linksOf(i)) {
      const other = s === i ? d : s;
      const a = el("a", {text: T.strings[name[other]]});
      a.addEventListener("click", () => { focus(other); select(other); });
      add(s === i ? "launched GPU op" : "launched by", a);
      add("launch latency", fmtUs((start[d] - start[s]) / 1e3));
    }
    box.replaceChildren(dl);
    draw();
  }
  function focus(i) {
    if (depth[i] >= layout[track[i]].rows) { collapsed[track[i]] = false; relayout(); }
    const span = view.t1 - view.t0, mid = start[i] + dur[i] / 2;
    view.t0 = mid - span / 2; view.t1 = mid + span / 2;
    view.scrollY = Math.max(0, layout[track[i]].y + depth[i] * ROW - H / 2);
  }
  function zoom(factor, x) {
    const t = tOf(x === undefined ? (LABEL_W + W) / 2 : x);
    const minSpan = 1000;  // 1 µs
    let t0 = t - (t - view.t0) * factor, t1 = t + (view.t1 - t) * factor;
    if (t1 - t0 < minSpan) return;
    view.t0 = t0; view.t1 = t1; draw();
  }
  function pan(dx) { const dt = dx * (view.t1 - view.t0) / (W - LABEL_W); view.t0 -= dt; view.t1 -= dt; draw(); }
  function scrollBy(dy) { view.scrollY = Math.min(Math.max(0, view.scrollY + dy), Math.max(0, totalHeight - H + ROW)); draw(); }
  function resize() {
    dpr = window.devicePixelRatio || 1;
    const r = canvas.getBoundingClientRect();
    W = Math.max(300, r.width); H = Math.max(200, r.height);
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    draw();
  }
  function init() {
    canvas = document.getElementById("tl-canvas"); ctx = canvas.getContext("2d");
    if (T.left_out_note) {  // the timeline holds a budget of events: say what it leaves out
      const wrap = document.getElementById("tl-wrap");
      wrap.parentNode.insertBefore(el("p", {id: "tl-left-out", class: "hint"}, T.left_out_note), wrap);
    }
    canvas.addEventListener("wheel", e => {
      e.preventDefault();
      if (e.shiftKey) scrollBy(e.deltaY || e.deltaX);
      else zoom(Math.pow(1.0015, e.deltaY), e.offsetX);
    }, {passive: false});
    let drag = null;
    canvas.addEventListener("mousedown", e => { drag = {x: e.clientX, y: e.clientY, moved: false}; canvas.focus(); });
    canvas.addEventListener("mousemove", e => {  // hover: the full name of a track or an event
      if (drag && drag.moved) return;
      let tip = "";
      if (e.offsetX < LABEL_W && e.offsetY >= AXIS) {
        const t = trackAt(e.offsetY);
        if (t >= 0) tip = `${T.tracks[t].group} / ${T.tracks[t].label}` + (layout[t].depth > 1 ? (collapsed[t] ? " (click to show all levels)" : " (click to fold)") : "");
      } else {
        const i = hit(e.offsetX, e.offsetY);
        if (i >= 0) tip = T.strings[name[i]] + (T.raw[name[i]] ? `\nrecorded as: ${T.raw[name[i]]}` : "") + ` · ${fmtUs(dur[i] / 1e3)}`;
      }
      if (canvas.title !== tip) canvas.title = tip;
    });
    window.addEventListener("mousemove", e => {
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 2 || drag.moved) {
        drag.moved = true; drag.x = e.clientX; drag.y = e.clientY;
        view.scrollY = Math.min(Math.max(0, view.scrollY - dy), Math.max(0, totalHeight - H + ROW));
        pan(dx);
      }
    });
    window.addEventListener("mouseup", e => {
      if (drag && !drag.moved && e.target === canvas) {
        if (e.offsetX < LABEL_W && e.offsetY >= AXIS) { const t = trackAt(e.offsetY); if (t >= 0 && layout[t].depth > 1) toggle(t); }
        else select(hit(e.offsetX, e.offsetY));
      }
      drag = null;
    });
    canvas.addEventListener("keydown", e => {
      const k = e.key.toLowerCase();
      if (k === "w") zoom(0.8); else if (k === "s") zoom(1.25);
      else if (k === "a") pan((W - LABEL_W) * 0.15); else if (k === "d") pan(-(W - LABEL_W) * 0.15);
      else return;
      e.preventDefault();
    });
    document.getElementById("tl-reset").addEventListener("click", () => { view.t0 = 0; view.t1 = tEnd * 1.01; view.scrollY = 0; draw(); });
    if (T.initial_view && T.initial_view.reason !== "whole profile")
      document.getElementById("tl-details").replaceChildren(el("em", {id: "tl-opened",
        text: `Opened on ${T.initial_view.reason} ("Zoom to all" shows everything). Click an event for details.`}));
    document.getElementById("tl-flows").addEventListener("change", draw);
    document.getElementById("tl-expand").addEventListener("click", e => {
      const open = e.target.dataset.open !== "1";
      T.tracks.forEach((tr, t) => { if (tr.kind === "cpu" || tr.kind === "annotations") collapsed[t] = !open; });
      e.target.dataset.open = open ? "1" : "0";
      e.target.textContent = open ? "Fold CPU threads" : "Show all CPU levels";
      relayout(); view.scrollY = Math.min(view.scrollY, Math.max(0, totalHeight - H + ROW)); draw();
    });
    window.addEventListener("resize", resize);
    resize();
  }
  function screenPos(i) {  // canvas-relative centre of event i (for tests and tooling)
    return {x: (Math.max(LABEL_W, xOf(start[i])) + Math.min(W, xOf(start[i] + dur[i]))) / 2, y: yOfEvent(i) + ROW / 2};
  }
  function reveal(i) { focus(i); draw(); }
  const events = {start, dur, track, name, kind, flowSrc, flowDst, depth};
  function trackTop(t) { return layout[t].y - HEAD - view.scrollY; }  // canvas y of a track's header
  return {init, draw, zoom, pan, select, hit, reveal, screenPos, toggle, trackTop, collapsed, layout, view, events,
          get drawn() { return drawn; }, get height() { return totalHeight; }};
})();
