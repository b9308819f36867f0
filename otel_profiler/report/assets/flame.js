// otel-profiler HTML report: the Flame graph tab, an icicle of call stacks (outermost on top) sized by
// GPU time, operators' CPU time or launches; click a frame to zoom into it and list the kernels under
// it, search to highlight frames, hover for the numbers.
"use strict";

const Flame = {
  started: false, metric: "gpu_ns", zoom: 0, hover: -1, rects: [], matched: null, matchedTotal: 0, ROW: 18,
  METRICS: {gpu_ns: "GPU time", cpu_ns: "CPU time (operators)", launches: "Launches (GPU operations)"},
  COLORS: {root: "#7d8797", gpu: "#3aa876", launch: "#8e6bd1", operator: "#6b9bd1", python: "#e8a13a", module: "#c9833e"},

  init() {
    const F = this.F = DATA.flame;
    this.children = F.parent.map(() => []);
    for (let i = 1; i < F.parent.length; i++) this.children[F.parent[i]].push(i);
    this.canvas = document.getElementById("fg-canvas");
    this.tip = document.getElementById("fg-tip");
    const total = document.getElementById("fg-total");
    total.dataset.gpuNs = String(F.gpu_ns[0]); total.dataset.cpuNs = String(F.cpu_ns[0]);
    total.dataset.launches = String(F.launches[0]);
    total.textContent = `All stacks: GPU time ${fmtUs(F.gpu_ns[0] / 1e3)} of ${fmtNum(F.launches[0])} GPU operations · ` +
      `operators' CPU time ${fmtUs(F.cpu_ns[0] / 1e3)} · ${fmtNum(F.count)} frames shown`;
    if (F.left_out)
      document.getElementById("fg-note").textContent = `The flame graph shows ${fmtNum(F.count)} of ${fmtNum(F.count + F.left_out)} ` +
        `call stacks (at most ${fmtNum(F.limit)}: those with the largest share of GPU time, CPU time or launches); what the ` +
        `${fmtNum(F.left_out)} others hold counts in their callers' figures.`;
    const select = document.getElementById("fg-metric");
    if (!F.gpu_ns[0] && F.cpu_ns[0]) { this.metric = "cpu_ns"; select.value = "cpu_ns"; }  // no GPU work: CPU time
    select.addEventListener("change", () => { this.metric = select.value; this.draw(); this.search(this.query || ""); });
    document.getElementById("fg-search").addEventListener("input", e => this.search(e.target.value));
    document.getElementById("fg-reset").addEventListener("click", () => this.zoomTo(0));
    this.canvas.addEventListener("mousemove", e => this.onHover(e));
    this.canvas.addEventListener("mouseleave", () => { this.hover = -1; this.tip.style.display = "none"; });
    this.canvas.addEventListener("click", e => { const i = this.nodeAt(e); if (i >= 0) this.zoomTo(i); });
    window.addEventListener("resize", () => { if (document.getElementById("flame").classList.contains("active")) this.draw(); });
    this.zoomTo(0);
  },

  value(i) { return this.F[this.metric][i]; },
  name(i) { return i === 0 ? "all" : this.F.frames[this.F.frame[i]]; },
  kind(i) { return this.F.kinds[this.F.kind[i]]; },

  path(i) { const out = []; for (; i >= 0; i = this.F.parent[i]) out.push(i); return out.reverse(); },

  layout(width) {
    // Rows 0..depth(zoom): the zoomed frame and its callers, full width; below, its callees by share.
    const rects = [], path = this.path(this.zoom);
    path.forEach((i, row) => rects.push({i, x: 0, w: width, row}));
    const whole = this.value(this.zoom);
    if (whole <= 0) return rects;
    const todo = [[this.zoom, 0, path.length - 1]];
    while (todo.length) {
      const [parent, x0, row] = todo.pop();
      let x = x0;
      for (const c of this.children[parent]) {
        const w = this.value(c) / whole * width;
        if (w >= 0.5) { rects.push({i: c, x, w, row: row + 1}); todo.push([c, x, row + 1]); }
        x += w;
      }
    }
    return rects;
  },

  draw() {
    const c = this.canvas, dpr = window.devicePixelRatio || 1, width = c.clientWidth;
    this.rects = this.layout(width);
    const rows = this.rects.reduce((m, r) => Math.max(m, r.row), 0) + 1;
    c.style.height = `${Math.max(rows * this.ROW, 120)}px`;
    c.width = width * dpr; c.height = Math.max(rows * this.ROW, 120) * dpr;
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, c.height);
    g.font = "11px system-ui, sans-serif"; g.textBaseline = "middle";
    const onPath = new Set(this.path(this.zoom));
    for (const r of this.rects) {
      const y = r.row * this.ROW, dim = this.matched && !this.matched.has(r.i);
      g.fillStyle = dim ? "#e3e7ee" : this.COLORS[this.kind(r.i)];
      g.globalAlpha = onPath.has(r.i) && r.i !== this.zoom ? 0.55 : 1;
      g.fillRect(r.x, y, Math.max(r.w - 0.5, 0.5), this.ROW - 1);
      g.globalAlpha = 1;
      if (r.w > 30) {
        g.fillStyle = dim ? "#8a93a3" : "#0d1220";
        let label = this.name(r.i);
        if (g.measureText(label).width > r.w - 6) {  // cut to fit, with an ellipsis
          label = label.slice(0, Math.floor((r.w - 6) / 5));
          while (label.length > 1 && g.measureText(label + "…").width > r.w - 6) label = label.slice(0, -1);
          label += "…";
        }
        g.fillText(label, r.x + 3, y + this.ROW / 2);
      }
    }
  },

  nodeAt(e) {
    const box = this.canvas.getBoundingClientRect(), x = e.clientX - box.left, y = e.clientY - box.top;
    const row = Math.floor(y / this.ROW);
    for (const r of this.rects) if (r.row === row && x >= r.x && x < r.x + r.w) return r.i;
    return -1;
  },

  rectOf(i) { return this.rects.find(r => r.i === i) || null; },

  figures(i) {
    const F = this.F, share = v => F[v][0] ? ` (${(F[v][i] / F[v][0] * 100).toFixed(1)}%)` : "";
    return `GPU time ${fmtUs(F.gpu_ns[i] / 1e3)}${share("gpu_ns")} · CPU time ${fmtUs(F.cpu_ns[i] / 1e3)}${share("cpu_ns")} · ` +
      `launches ${fmtNum(F.launches[i])}${share("launches")}`;
  },

  onHover(e) {
    const i = this.nodeAt(e);
    this.hover = i;
    if (i < 0) { this.tip.style.display = "none"; return; }
    this.tip.replaceChildren(el("b", {text: this.name(i)}), el("div", {text: `${this.kind(i)} · ${this.figures(i)}`}));
    const box = this.canvas.parentElement.getBoundingClientRect();
    this.tip.style.display = "block";
    this.tip.style.left = `${Math.min(e.clientX - box.left + 12, box.width - 360)}px`;
    this.tip.style.top = `${e.clientY - box.top + 14 + this.canvas.parentElement.scrollTop}px`;
  },

  kernelsUnder(i) {
    // The GPU operations in the zoomed frame's subtree, summed by name (those shown: see the note).
    const byName = new Map(), todo = [i];
    while (todo.length) {
      const n = todo.pop();
      if (this.kind(n) === "gpu") {
        const k = byName.get(this.name(n)) || {name: this.name(n), count: 0, gpu_us: 0};
        k.count += this.F.launches[n]; k.gpu_us += this.F.gpu_ns[n] / 1e3;
        byName.set(k.name, k);
      }
      todo.push(...this.children[n]);
    }
    return [...byName.values()].sort((a, b) => b.gpu_us - a.gpu_us);
  },

  zoomTo(i) {
    this.zoom = i;
    this.draw();
    const kernels = this.kernelsUnder(i), top = kernels.slice(0, 25);
    const details = document.getElementById("fg-details");
    details.dataset.node = String(i);
    details.replaceChildren(el("h2", {text: this.path(i).map(n => this.name(n)).join(" → ")}),
      el("div", {"class": "note", id: "fg-figures", text: `${this.kind(i)} · ${this.figures(i)}`}),
      kernels.length ? el("h3", {text: `GPU operations under it (${fmtNum(kernels.length)} names${kernels.length > top.length ? `, the ${top.length} longest` : ""})`}) :
        el("p", {text: "No GPU operation under this frame."}),
      ...(kernels.length ? [kernelTable(top)] : []));
  },

  search(text) {
    this.query = text;
    const q = text.trim().toLowerCase(), out = document.getElementById("fg-match");
    if (!q) { this.matched = null; this.matchedTotal = 0; out.textContent = ""; this.draw(); return; }
    const F = this.F, hit = F.frames.map(f => f.toLowerCase().includes(q));
    this.matched = new Set();
    let total = 0;
    const todo = [[0, false]];
    while (todo.length) {  // a match under a match is counted once
      const [n, inside] = todo.pop();
      const m = n > 0 && hit[F.frame[n]];
      if (m) this.matched.add(n);
      if (m && !inside) total += this.value(n);
      for (const c of this.children[n]) todo.push([c, inside || m]);
    }
    this.matchedTotal = total;
    out.dataset.total = String(total);
    const whole = this.value(0);
    out.textContent = `${fmtNum(this.matched.size)} frames match: ${this.metric === "launches" ? fmtNum(total) : fmtUs(total / 1e3)}` +
      ` of ${this.METRICS[this.metric]}${whole ? ` (${(total / whole * 100).toFixed(1)}%)` : ""}`;
    this.draw();
  },
};
