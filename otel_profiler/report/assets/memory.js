// otel-profiler HTML report: the Memory tab (GPU memory from the allocator's [memory] events): the
// allocated and reserved bytes over time per device, the peak table, memory per step, the largest
// allocations; the CPU allocator's peak, torch.cuda peaks per step of a live run and the CUDA memory
// snapshots of a profile folder when there are any.
"use strict";

function memoryChart(tl) {
  const w = 900, h = 220, pad = 64;
  const root = svg("svg", {viewBox: `0 0 ${w} ${h + 20}`, width: "100%", id: "mem-chart"});
  const n = tl.t_us.length, tMax = Math.max(1, tl.t_us[n - 1] - tl.t_us[0]);
  const top = Math.max(1, ...tl.allocated, ...(tl.reserved || []));
  const x = t => pad + (w - pad - 4) * (t - tl.t_us[0]) / tMax, y = v => h - (h - 10) * v / top;
  const line = (values, color, cls) => {
    let d = `M ${x(tl.t_us[0])} ${y(values[0])}`;
    for (let i = 1; i < n; i++) d += ` H ${x(tl.t_us[i])} V ${y(values[i])}`;  // a step function
    root.append(svg("path", {d, fill: "none", stroke: color, "stroke-width": 1.4, "class": cls}));
  };
  for (const g of [0, 0.5, 1]) {
    root.append(svg("line", {x1: pad, x2: w, y1: y(top * g), y2: y(top * g), stroke: "#d9dee7"}));
    const t = svg("text", {x: 2, y: y(top * g) + 3}); t.textContent = fmtBytes(top * g); root.append(t);
  }
  if (tl.reserved) line(tl.reserved, "#e8a13a", "reserved");
  line(tl.allocated, "#2f6fde", "allocated");
  const t = svg("text", {x: w, y: h + 14, "text-anchor": "end"}); t.textContent = fmtUs(tMax); root.append(t);
  return root;
}

function memTable(id, title, header, rows) {
  const t = el("table", {}, el("thead", {}, el("tr", {}, ...header.map(h => el("th", {text: h})))));
  const body = el("tbody");
  for (const r of rows) body.append(el("tr", {}, ...r.map(c => c instanceof Node ? el("td", {"class": "num"}, c) :
    el("td", {"class": typeof c === "number" ? "num" : "name", text: c == null ? "–" : (typeof c === "number" ? fmtNum(c) : String(c))}))));
  t.append(body);
  return el("div", {"class": "card stat-card", id}, el("h2", {text: title}), el("div", {"class": "table-wrap"}, t));
}

function liveMemory(root) {
  const M = S.memory || {};
  const host = Object.entries(M.host || {});
  if (host.length)
    root.append(memTable("mem-host", "Host memory (the CPU allocator's [memory] events)",
      ["Device", "Peak allocated", "Final allocated", "Step", "Operator", "Allocations"],
      host.map(([k, d]) => [k, fmtBytes(d.peak.allocated_bytes), fmtBytes(d.final_allocated_bytes), d.peak.step, d.peak.operator, d.allocations])));
  const steps = (S.ranks_meta || []).flatMap(m => ((m.cuda_memory || {}).steps || []).map(s => [m.rank, s.device, s.step,
    fmtBytes(s.peak_allocated_bytes), fmtBytes(s.peak_reserved_bytes), fmtBytes(s.allocated_bytes)]));
  if (steps.length)
    root.append(memTable("mem-cuda-steps", "CUDA memory per step (torch.cuda peaks)",
      ["Rank", "Device", "Step", "Peak allocated", "Peak reserved", "Allocated at end"], steps));
  if ((M.snapshots || []).length)
    root.append(memTable("mem-snapshots", "CUDA memory snapshots (open the file in pytorch.org/memory_viz)",
      ["Rank", "Reason", "Segments", "Reserved", "Allocated", "File"],
      M.snapshots.map(s => [s.rank, s.reason, s.segments == null ? null : s.segments, s.reserved_bytes == null ? null : fmtBytes(s.reserved_bytes),
        s.allocated_bytes == null ? null : fmtBytes(s.allocated_bytes), s.file + (s.error ? ` (${s.error})` : "")])));
}

function buildMemory() {
  const root = document.getElementById("memory");
  const devices = Object.entries((S.memory || {}).devices || {});
  if (!devices.length) {
    root.append(el("p", {"class": "note missing", id: "no-memory",
      text: "No GPU memory events in this profile. Record them with torch.profiler.profile(profile_memory=True), or OTEL_PROFILER_ACTIVITIES=gpu,memory in a live run."}));
    liveMemory(root);
    return;
  }
  const timeline = DATA.dashboard.memory || {};
  const chart = card("GPU memory over time");
  chart.id = "mem-timeline";
  const sel = el("select", {id: "mem-device"});
  for (const [k] of devices) sel.append(el("option", {value: k, text: "device " + k}));
  const holder = el("div");
  const draw = () => { if (timeline[sel.value]) holder.replaceChildren(memoryChart(timeline[sel.value])); };
  sel.addEventListener("change", draw);
  chart.append(sel, holder, el("div", {"class": "legend"},
    el("span", {}, el("i", {style: "background:#2f6fde"}), "allocated (by tensors)"),
    el("span", {}, el("i", {style: "background:#e8a13a"}), "reserved (by the caching allocator)")));
  root.append(chart);
  draw();
  root.append(memTable("mem-peaks", "Peak per device", ["Device", "Peak allocated", "Reserved at peak", "Peak reserved", "Step", "Operator", "Allocations", "Baseline"],
    devices.map(([k, d]) => [k, metric(`memory.devices.${k}.peak.allocated_bytes`, d.peak.allocated_bytes, fmtBytes),
      d.peak.reserved_bytes == null ? "–" : fmtBytes(d.peak.reserved_bytes),
      d.peak_reserved_bytes == null ? "–" : metric(`memory.devices.${k}.peak_reserved_bytes`, d.peak_reserved_bytes, fmtBytes),
      d.peak.step, d.peak.operator, d.allocations, d.baseline === "absolute" ? "absolute" : "from the window start"])));
  root.append(memTable("mem-steps", "Per step (growth: allocated at the step's end minus at the end of the step before)",
    ["Device", "Step", "Peak allocated", "Allocated at end", "Growth"],
    devices.flatMap(([k, d]) => d.steps.map(s => [k, s.step, s.peak_allocated_bytes == null ? null : fmtBytes(s.peak_allocated_bytes),
      s.end_allocated_bytes == null ? null : fmtBytes(s.end_allocated_bytes), s.growth_bytes == null ? null : fmtBytes(s.growth_bytes)]))));
  root.append(memTable("mem-largest", "Largest allocations", ["Device", "Size", "Step", "Operator"],
    devices.flatMap(([k, d]) => d.largest_allocations.map(a => [k, fmtBytes(a.bytes), a.step, a.operator]))));
  liveMemory(root);
}
