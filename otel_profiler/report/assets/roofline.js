// otel-profiler HTML report: the Roofline tab (summary section "flops"): each operator and shape as a
// point, achieved TFLOP/s against arithmetic intensity (FLOPs per byte) on log scales, with the
// device's roofs (memory bandwidth times intensity, then the compute peak); hovering a point shows
// its figures. Below, the FLOPs by class and the operators table; MFU and the peak used above.
"use strict";

const ROOF_CLASSES = {gemm: "#2f6fde", conv: "#7a4fd0", attention: "#d0443a", elementwise: "#e8a13a", other: "#6b7686"};

function fmtSig(v) {  // four significant digits, whatever the magnitude
  return v.toLocaleString("en-US", {maximumSignificantDigits: 4});
}

function log10Range(values) {
  const v = values.filter(x => x > 0);
  if (!v.length) return [0, 1];
  return [Math.floor(Math.log10(Math.min(...v))), Math.ceil(Math.log10(Math.max(...v))) || 1];
}

function rooflineChart(F) {
  const points = F.by_operator.filter(r => r.intensity > 0 && r.tflops_per_s > 0);
  const w = 900, h = 420, padL = 64, padB = 40, padT = 12, padR = 16;
  const peak = F.peak;
  const xs = points.map(p => p.intensity), ys = points.map(p => p.tflops_per_s);
  if (peak) { ys.push(peak.tflops); if (peak.tb_per_s) xs.push(peak.tflops / peak.tb_per_s); }
  let [x0, x1] = log10Range(xs), [y0, y1] = log10Range(ys);
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  const X = v => padL + (w - padL - padR) * (Math.log10(v) - x0) / (x1 - x0);
  const Y = v => h - padB - (h - padB - padT) * (Math.log10(v) - y0) / (y1 - y0);
  const root = svg("svg", {viewBox: `0 0 ${w} ${h}`, width: "100%", id: "roofline-chart"});
  for (let e = x0; e <= x1; e++) {
    root.append(svg("line", {x1: X(10 ** e), x2: X(10 ** e), y1: padT, y2: h - padB, stroke: "#e3e7ee"}));
    const t = svg("text", {x: X(10 ** e), y: h - padB + 14, "text-anchor": "middle"}); t.textContent = `${10 ** e}`; root.append(t);
  }
  for (let e = y0; e <= y1; e++) {
    root.append(svg("line", {x1: padL, x2: w - padR, y1: Y(10 ** e), y2: Y(10 ** e), stroke: "#e3e7ee"}));
    const t = svg("text", {x: padL - 4, y: Y(10 ** e) + 3, "text-anchor": "end"}); t.textContent = `${10 ** e}`; root.append(t);
  }
  const xl = svg("text", {x: (w + padL) / 2, y: h - 6, "text-anchor": "middle"}); xl.textContent = "arithmetic intensity (FLOPs per byte)"; root.append(xl);
  const yl = svg("text", {x: 12, y: padT + 8}); yl.textContent = "TFLOP/s"; root.append(yl);
  if (peak) {
    const ridge = peak.tb_per_s ? peak.tflops / peak.tb_per_s : null;
    const left = 10 ** x0, right = 10 ** x1;
    if (ridge) {
      const from = Math.max(left, 10 ** y0 / peak.tb_per_s);
      root.append(svg("line", {x1: X(from), y1: Y(from * peak.tb_per_s), x2: X(Math.min(ridge, right)),
        y2: Y(Math.min(ridge, right) * peak.tb_per_s), stroke: "#1b7f4b", "stroke-width": 2, "class": "roof roof-memory"}));
    }
    root.append(svg("line", {x1: X(ridge ? Math.max(ridge, left) : left), y1: Y(peak.tflops), x2: X(right), y2: Y(peak.tflops),
      stroke: "#1b7f4b", "stroke-width": 2, "class": "roof roof-compute"}));
    const label = svg("text", {x: w - padR, y: Y(peak.tflops) - 5, "text-anchor": "end", "class": "roof-label"});
    label.textContent = `${peak.device}, ${peak.dtype}: ${fmtNum(peak.tflops)} TFLOP/s` + (peak.tb_per_s ? `, ${fmtNum(peak.tb_per_s)} TB/s` : "");
    root.append(label);
  }
  const maxUs = Math.max(1, ...points.map(p => p.gpu_us));
  const tip = el("div", {"class": "roof-tip", id: "roofline-tip", hidden: ""});
  points.forEach((p, i) => {
    const dot = svg("circle", {cx: X(p.intensity), cy: Y(p.tflops_per_s), r: 3 + 9 * Math.sqrt(p.gpu_us / maxUs),
      fill: ROOF_CLASSES[p.class] || ROOF_CLASSES.other, "fill-opacity": 0.7, stroke: "#223", "stroke-width": 0.5,
      "class": "roof-point", "data-index": i});
    dot.addEventListener("mouseenter", () => {
      tip.hidden = false;
      tip.textContent = `${p.name} ${p.shapes} · ${fmtSig(p.tflops_per_s)} TFLOP/s · ${fmtSig(p.intensity)} FLOPs/byte · ` +
        `${fmtUs(p.gpu_us)} GPU in ${fmtNum(p.calls)} calls` + (p.bound ? ` · ${p.bound}-bound` : "");
    });
    dot.addEventListener("mouseleave", () => { tip.hidden = true; });
    root.append(dot);
  });
  return [root, tip, points.length];
}

function buildRoofline() {
  const root = document.getElementById("roofline");
  const F = S.flops;
  if (!F || !F.operators) {
    root.append(el("p", {"class": "note missing", id: "no-flops",
      text: "No FLOPs: the trace has no operator input shapes (record them with record_shapes=True) or none of its operators has a formula."}));
    return;
  }
  const mfu = F.mfu == null ? (F.peak ? "–" : "unknown device: set OTEL_PROFILER_PEAK_TFLOPS to get MFU") : `${fmtNum(100 * F.mfu)}%`;
  root.append(el("div", {"class": "card", id: "roofline-head"},
    el("h2", {text: "Roofline"}),
    el("p", {text: `MFU ${mfu} · ${fmtNum(F.flops / 1e12)} TFLOPs in ${fmtNum(F.operators)} operators · ` +
      (F.peak ? `peak: ${F.peak.device}, ${F.peak.dtype}` : "no peak for this device")})));
  const [chart, tip, drawn] = rooflineChart(F);
  root.append(el("div", {"class": "card"}, chart, tip, el("p", {"class": "note", text: `${drawn} operator shapes drawn; a point's size is its GPU time.`})));
  root.append(memTable("roofline-classes", "FLOPs by class", ["Class", "TFLOPs", "Bytes", "GPU time", "TFLOP/s"],
    Object.entries(F.by_class).map(([k, c]) => [k, c.flops / 1e12, fmtBytes(c.bytes), fmtUs(c.gpu_us), c.tflops_per_s])));
  root.append(memTable("roofline-operators", "Operators by GPU time", ["Operator", "Shapes", "Calls", "TFLOPs", "GPU time", "TFLOP/s", "TB/s", "FLOPs/byte", "Bound"],
    F.by_operator.map(r => [r.name, r.shapes, r.calls, r.flops / 1e12, fmtUs(r.gpu_us), r.tflops_per_s, r.tb_per_s, r.intensity, r.bound])));
}
