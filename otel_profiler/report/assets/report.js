// otel-profiler HTML report: dashboard, statistical summary tables, canvas timeline, insights.
// Every name from a trace reaches the page through textContent or canvas fillText, never as HTML.
"use strict";

const DATA = JSON.parse(document.getElementById("report-data").textContent);
const S = DATA.summary;
const API_WORD = {cuda: "CUDA API", rocm: "HIP API"}[S.platform] || "GPU API";

// ------------------------------------------------------------------ helpers
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function fmtNum(v, digits) {
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v) && digits === undefined) return v.toLocaleString("en-US");
  return v.toLocaleString("en-US", {maximumFractionDigits: digits === undefined ? 3 : digits});
}
function fmtUs(us) {
  const a = Math.abs(us);
  if (a >= 1e6) return fmtNum(us / 1e6, 3) + " s";
  if (a >= 1e3) return fmtNum(us / 1e3, 3) + " ms";
  return fmtNum(us, 3) + " µs";
}
function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return fmtNum(b, 2) + " " + u[i];
}
// A number on the dashboard: shown formatted, its exact value kept in data-value for checks.
function metric(path, value, format) {
  return el("span", {"class": "metric", "data-metric": path, "data-value": String(value), text: (format || fmtNum)(value)});
}
function card(title, ...children) { return el("div", {"class": "card"}, el("h2", {text: title}), ...children); }
const PALETTE = ["#2f6fde", "#e8a13a", "#3aa876", "#d64545", "#8e6bd1", "#4fb3c8", "#c9833e", "#7d8797", "#b84f9a", "#5d9c3a"];
function hashColor(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
  return "hsl(" + ((h >>> 0) % 360) + ",55%," + (48 + ((h >>> 9) % 16)) + "%)";
}
function b64(str, Type) {
  const bin = atob(str), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}

// A kernel's full name, with the recorded (mangled) one when it differs: what a hover shows.
function fullName(r) { return r.raw_name && r.raw_name !== r.name ? `${r.name}\n\nrecorded as: ${r.raw_name}` : r.name; }
function dims(v) { return Array.isArray(v) ? v.join("×") : "–"; }

// Horizontal bars: items [{label, title?, value, path}], value formatted with fmt.
function bars(items, fmt, title) {
  const max = Math.max(1e-12, ...items.map(i => i.value));
  const box = el("div", {"class": "bars"});
  if (title) box.setAttribute("data-panel", title);
  for (const it of items) {
    const fill = el("div", {"class": "fill"}); fill.style.width = (100 * it.value / max) + "%";
    if (it.color) fill.style.background = it.color;
    box.append(el("div", {"class": "row"}, el("span", {"class": "name", title: it.title || it.label, text: it.label}),
      el("div", {"class": "track"}, fill), it.path ? metric(it.path, it.value, fmt) : el("span", {"class": "val", text: fmt(it.value)})));
  }
  if (!items.length) box.append(el("div", {"class": "note", text: "(none in this profile)"}));
  return box;
}

// Histogram of values (µs) as an SVG with `nbins` bins.
function histogram(values, nbins, label) {
  const w = 420, h = 150, pad = 28;
  const root = svg("svg", {viewBox: `0 0 ${w} ${h + 20}`, width: "100%", "data-count": String(values.length)});
  if (!values.length) { const t = svg("text", {x: 10, y: 20}); t.textContent = "(no data)"; root.append(t); return root; }
  const lo = Math.min(...values), hi = Math.max(...values);
  const width = (hi - lo) / nbins || 1;
  const counts = new Array(nbins).fill(0);
  for (const v of values) counts[Math.min(nbins - 1, Math.floor((v - lo) / width))]++;
  const cmax = Math.max(...counts), bw = (w - pad) / nbins;
  counts.forEach((c, i) => {
    const bh = (h - 10) * c / cmax;
    const r = svg("rect", {x: pad + i * bw + 1, y: h - bh, width: Math.max(1, bw - 2), height: bh, fill: "#2f6fde"});
    const t = svg("title"); t.textContent = `${fmtUs(lo + i * width)} – ${fmtUs(lo + (i + 1) * width)}: ${c}`;
    r.append(t); root.append(r);
  });
  const axis = (x, s, anchor) => { const t = svg("text", {x, y: h + 14, "text-anchor": anchor}); t.textContent = s; root.append(t); };
  axis(pad, fmtUs(lo), "start"); axis(w, fmtUs(hi), "end");
  const yl = svg("text", {x: 2, y: 12}); yl.textContent = String(cmax); root.append(yl);
  const xl = svg("text", {x: w / 2, y: h + 14, "text-anchor": "middle"}); xl.textContent = label; root.append(xl);
  return root;
}

// Utilization (%) per bucket as an SVG area chart.
function lineChart(points, bucketUs) {
  const w = 420, h = 150, pad = 28;
  const root = svg("svg", {viewBox: `0 0 ${w} ${h + 20}`, width: "100%"});
  const n = points.length, x = i => pad + (w - pad) * i / Math.max(1, n - 1), y = v => h - (h - 10) * v / 100;
  let d = `M ${x(0)} ${h}`;
  points.forEach((v, i) => { d += ` L ${x(i)} ${y(v)}`; });
  d += ` L ${x(n - 1)} ${h} Z`;
  root.append(svg("path", {d, fill: "rgba(47,111,222,0.25)", stroke: "#2f6fde", "stroke-width": 1.2}));
  for (const g of [0, 50, 100]) {
    root.append(svg("line", {x1: pad, x2: w, y1: y(g), y2: y(g), stroke: "#d9dee7"}));
    const t = svg("text", {x: 2, y: y(g) + 3}); t.textContent = g + "%"; root.append(t);
  }
  const t = svg("text", {x: w, y: h + 14, "text-anchor": "end"}); t.textContent = fmtUs(bucketUs * n); root.append(t);
  return root;
}

// ------------------------------------------------------------------ dashboard
function buildDashboard() {
  const root = document.getElementById("dashboard");
  const grid = el("div", {"class": "grid"});
  root.append(grid);
  const devices = Object.entries(S.devices);
  const hasGpu = devices.length > 0 || S.kernels.count > 0;
  // Without GPU work the GPU cards would only show zeros: one card says why they are left out.
  const shown = hasGpu ? grid : el("div");
  if (!hasGpu) grid.append(card("GPU", el("div", {"class": "note", id: "no-gpu", text:
    "No GPU work in this profile (no kernels, memory copies or memsets were recorded): the GPU cards " +
    "(active vs idle, utilization over time, top kernels, GPU time by activity, kernel precision, " +
    "memory copies, launch latency) are left out."})));

  // GPU active vs idle.
  const gpu = card("GPU active vs idle time");
  for (const [key, d] of devices) {
    const stack = el("div", {"class": "stack"});
    const busy = el("div"); busy.style.cssText = `width:${100 - d.idle_pct}%;background:#2f6fde`;
    const idle = el("div"); idle.style.cssText = `width:${d.idle_pct}%;background:#d9dee7`;
    stack.append(busy, idle);
    gpu.append(el("div", {"class": "kpis"},
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "device " + key + " active"}), el("div", {"class": "v"}, metric(`devices.${key}.busy_us`, d.busy_us, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "idle"}), el("div", {"class": "v"}, metric(`devices.${key}.idle_us`, d.idle_us, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "idle %"}), el("div", {"class": "v"}, metric(`devices.${key}.idle_pct`, d.idle_pct, v => fmtNum(v, 1) + "%")))), stack);
  }
  shown.append(gpu);

  // CPU active time.
  const cpu = card("CPU active time");
  const ca = Object.entries(DATA.dashboard.cpu_active);
  for (const [rank, c] of ca) {
    cpu.append(el("div", {"class": "kpis"},
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "rank " + rank + " CPU active"}), el("div", {"class": "v"}, metric(`cpu_active.${rank}.active_us`, c.active_us, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "of window"}), el("div", {"class": "v"}, metric(`cpu_active.${rank}.window_us`, c.window_us, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "active %"}), el("div", {"class": "v", text: fmtNum(c.active_pct, 1) + "%"}))));
  }
  cpu.append(el("div", {"class": "note", text: ca.length ? "Union of CPU-side events (ops, runtime calls, Python functions, annotations) over all threads." : "No CPU-side events in this profile."}));
  grid.append(cpu);

  // Utilization over time.
  const util = card("GPU utilization over time");
  const utilData = DATA.dashboard.utilization, keys = Object.keys(utilData);
  if (keys.length) {
    const sel = el("select", {id: "util-device"});
    for (const k of keys) sel.append(el("option", {value: k, text: "device " + k}));
    const holder = el("div");
    const draw = () => { const u = utilData[sel.value]; holder.replaceChildren(lineChart(u.util_pct, u.bucket_us)); };
    sel.addEventListener("change", draw);
    util.append(sel, holder, el("div", {"class": "note", text: "Merged GPU-op busy time per bucket / bucket length."}));
    draw();
  }
  shown.append(util);
  grid.append(cpuUtilCard(), computeCard());

  // Top-k kernels by time and by launch count.
  const top = card("Top kernels");
  const k = el("input", {type: "number", id: "topk", min: "1", max: "200", value: "10"});
  const byTime = el("div", {id: "top-by-time"}), byCount = el("div", {id: "top-by-count"});
  const drawTop = () => {
    const n = Math.max(1, parseInt(k.value, 10) || 10), rows = S.kernels.by_name;
    const t = rows.slice().sort((a, b) => b.total_us - a.total_us).slice(0, n);
    const c = rows.slice().sort((a, b) => b.instances - a.instances).slice(0, n);
    const item = (r, value, path) => ({label: r.short_name || r.name, title: fullName(r), value, path});
    byTime.replaceChildren(el("h2", {text: "by total time"}), bars(t.map(r => item(r, r.total_us, "kernels.by_name.total_us")), fmtUs, "top-time"));
    byCount.replaceChildren(el("h2", {text: "by launch count"}), bars(c.map(r => item(r, r.instances, "kernels.by_name.instances")), fmtNum, "top-count"));
  };
  k.addEventListener("input", drawTop);
  top.append(el("label", {text: "k = "}, k), byTime, byCount);
  drawTop();
  shown.append(top);

  // Step-time histogram.
  const steps = card("Step time distribution");
  const sd = S.steps.items.map(s => s.duration_us);
  if (!S.steps.count) steps.append(el("div", {"class": "note missing", id: "no-steps", text:
    "No step markers in this profile: the trace has no ProfilerStep#N events (torch.profiler writes one per prof.step() call; " +
    "otel-profiler's own capture marks the steps it sees), so step times, step outliers and straggler ranks cannot be computed."}));
  else steps.append(el("div", {"class": "kpis"},
    el("div", {"class": "kpi"}, el("div", {"class": "l", text: "steps"}), el("div", {"class": "v"}, metric("steps.count", S.steps.count))),
    el("div", {"class": "kpi"}, el("div", {"class": "l", text: "p50"}), el("div", {"class": "v"}, metric("steps.duration_us.p50", S.steps.duration_us.p50, fmtUs))),
    el("div", {"class": "kpi"}, el("div", {"class": "l", text: "mean"}), el("div", {"class": "v"}, metric("steps.duration_us.mean", S.steps.duration_us.mean, fmtUs))),
    el("div", {"class": "kpi"}, el("div", {"class": "l", text: "max"}), el("div", {"class": "v"}, metric("steps.duration_us.max", S.steps.duration_us.max, fmtUs)))),
    histogram(sd, Math.min(20, Math.max(5, sd.length)), "step duration"));
  grid.append(steps);

  // GPU time by activity.
  const memcpyTotal = Object.values(S.memcpy).reduce((a, m) => a + m.total_us, 0);
  shown.append(card("GPU time by activity (summed)", bars([
    {label: "kernels", value: S.kernels.total_us, path: "kernels.total_us", color: PALETTE[0]},
    {label: "memcpy + memset", value: memcpyTotal + S.memset.total_us, path: "memcpy+memset.total_us", color: PALETTE[1]},
    {label: "synchronization (GPU sync events)", value: S.sync.total_us, path: "sync.total_us", color: PALETTE[3]},
    {label: "host blocked in syncs and blocking copies", value: S.sync.host_blocked_us || 0, path: "sync.host_blocked_us", color: PALETTE[6]},
  ], fmtUs, "activity"), bars(Object.entries(S.kernels.by_class).map(([c, v]) => ({label: "kernel class: " + c, value: v, path: "kernels.by_class." + c})), fmtUs, "class")));

  // Kernel precision.
  shown.append(card("Kernel time by precision (from kernel names)",
    bars(Object.entries(DATA.dashboard.precision).map(([p, v], i) => ({label: p, value: v, path: "precision." + p, color: PALETTE[i % PALETTE.length]})), fmtUs, "precision")));

  // Memcpy by kind.
  const mc = Object.entries(S.memcpy).filter(([, m]) => m.count);
  const mcCard = card("Memory copies by kind", bars(mc.map(([kind, m]) => ({label: `${kind} (${fmtNum(m.count)} copies, ${fmtBytes(m.bytes)})`, value: m.total_us, path: `memcpy.${kind}.total_us`})), fmtUs, "memcpy"));
  shown.append(mcCard);

  // Custom annotation histogram with a selector.
  const ann = card("Custom annotation durations");
  const names = Object.keys(DATA.dashboard.annotations).sort();
  if (names.length) {
    const sel = el("select", {id: "annotation-select"});
    for (const n of names) sel.append(el("option", {value: n, text: `${n} (${DATA.dashboard.annotations[n].length})`}));
    const holder = el("div", {id: "annotation-hist"});
    const draw = () => holder.replaceChildren(histogram(DATA.dashboard.annotations[sel.value], 20, sel.value.slice(0, 60)));
    sel.addEventListener("change", draw);
    ann.append(sel, holder); draw();
  } else ann.append(el("div", {"class": "note", text: "No user annotations in this profile."}));
  grid.append(ann);

  // Launch latency.
  const L = S.launch;
  shown.append(card("Kernel launch latency and delay",
    el("div", {"class": "kpis"},
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "latency p50"}), el("div", {"class": "v"}, metric("launch.latency_us.p50", L.latency_us.p50, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "latency p99"}), el("div", {"class": "v"}, metric("launch.latency_us.p99", L.latency_us.p99, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "delay p50"}), el("div", {"class": "v"}, metric("launch.delay_us.p50", L.delay_us.p50, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "linked GPU ops"}), el("div", {"class": "v"}, metric("launch.matched_gpu_ops", L.matched_gpu_ops)))),
    el("div", {"class": "note", text: "Latency: GPU start − launch start (as Nsight Systems measures it). Delay: GPU start − launch end, ≥ 0 (HTA)."})));
}

// ------------------------------------------------------------------ statistics tables
const STAT_COLS = [["total_us", "Total (µs)"], ["avg_us", "Avg (µs)"], ["med_us", "Med (µs)"], ["min_us", "Min (µs)"], ["max_us", "Max (µs)"], ["std_us", "StdDev (µs)"]];

function sortableTable(id, title, columns, rows) {
  // columns: [key, label, opts?]; rows: array of objects. opts.display(row): the text shown (a short
  // form); opts.title(row): the full text, shown on hover, and in place of the short one on click.
  const wrap = el("div", {"class": "card stat-card", id});
  const filter = el("input", {type: "search", placeholder: "filter…"});
  const count = el("span", {"class": "note"});
  const table = el("table"), thead = el("thead"), tbody = el("tbody");
  const headRow = el("tr");
  let sortKey = null, dir = 1;
  const LIMIT = 2000;
  const render = () => {
    const q = filter.value.toLowerCase();
    let view = q ? rows.filter(r => columns.some(([k]) => typeof r[k] === "string" && r[k].toLowerCase().includes(q))) : rows.slice();
    if (sortKey) view.sort((a, b) => {
      const x = a[sortKey], y = b[sortKey];
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir;
    });
    count.textContent = `${view.length} of ${rows.length} rows` + (view.length > LIMIT ? ` (first ${LIMIT} shown)` : "");
    tbody.replaceChildren(...view.slice(0, LIMIT).map(r => el("tr", {}, ...columns.map(([k, , opts]) => {
      const v = r[k];
      if (opts && opts.display && !opts.title)
        return el("td", {"class": "name", "data-value": String(v), text: opts.display(r)});
      if (opts && opts.display) {
        const short = opts.display(r), full = opts.title(r);
        const td = el("td", {"class": "name" + (short !== full ? " folded" : ""), "data-value": String(v), title: full, text: short});
        if (short !== full) td.addEventListener("click", () => {
          const open = td.classList.toggle("unfolded"); td.textContent = open ? full : short;
        });
        return td;
      }
      return el("td", {"class": typeof v === "number" ? "num" : "name", "data-value": String(v), text: typeof v === "number" ? fmtNum(v) : String(v)});
    }))));
  };
  for (const [k, label] of columns) {
    const th = el("th", {"data-key": k, text: label});
    th.addEventListener("click", () => {
      dir = sortKey === k ? -dir : (typeof (rows[0] || {})[k] === "number" ? -1 : 1); sortKey = k;
      for (const h of headRow.children) h.classList.remove("asc", "desc");
      th.classList.add(dir > 0 ? "asc" : "desc");
      render();
    });
    headRow.append(th);
  }
  thead.append(headRow); table.append(thead, tbody);
  filter.addEventListener("input", render);
  wrap.append(el("h2", {text: title}), el("div", {"class": "controls"}, filter, count), el("div", {"class": "table-wrap"}, table));
  render();
  return wrap;
}

function buildStatistics() {
  const root = document.getElementById("statistics");
  const multi = "ranks" in S;
  const metas = S.ranks_meta || [];
  if (multi || metas.some(m => m.file || m.source_file))
    root.append(sortableTable("stat-ranks", `Ranks (${metas.length})`,
      [["rank", "Rank"], ["world_size", "World size"], ["host", "Host"], ["devices", "Devices"], ["file", "File"]],
      metas.map(m => ({rank: m.rank, world_size: m.world_size, host: m.host_name || "–", devices: (m.devices || []).join(", ") || "–",
                       file: m.file || m.source_file || m.source || ""}))));
  const cpu = Object.entries(S.cpu || {});
  if (cpu.length)
    root.append(sortableTable("stat-cpu", "CPU utilization while the steps ran (machine: all its cores; process: the training process's share of its cores; others: the rest of the machine)",
      [["rank", "Rank"], ["samples", "Samples"], ["cores", "Cores"], ["machine", "Machine % mean"], ["process", "Process % mean"],
       ["process_cores", "Process (cores)"], ["others_cores", "Others (cores)"]],
      cpu.map(([rank, u]) => ({rank, samples: u.samples, cores: u.cores, machine: u.machine_pct.mean, process: u.process_pct.mean,
                               process_cores: u.process_cores, others_cores: u.others_cores}))));
  const gpu = Object.keys(S.devices).length > 0 || S.kernels.count > 0;
  const gpuRoot = gpu ? root : el("div");  // without GPU work its tables would be empty: left out, one line says so
  if (!gpu) root.append(el("p", {"class": "note", id: "no-gpu-tables", text:
    "No GPU work in this profile: the GPU tables (temporal breakdown, kernels, memory copies, API calls, synchronization, launches, streams, GPU annotations) are left out."}));
  gpuRoot.append(sortableTable("stat-devices", "GPU temporal breakdown (per device)",
    [["device", "Device"], ["span_us", "Span (µs)"], ["busy_us", "Busy (µs)"], ["idle_pct", "Idle %"], ["compute_pct", "Compute %"], ["non_compute_pct", "Non-compute %"], ["ops", "Ops"]],
    Object.entries(S.devices).map(([device, d]) => Object.assign({device}, d))));
  gpuRoot.append(sortableTable("stat-kernels", `GPU kernels by name (${S.kernels.by_name.length} names, ${S.kernels.count} launches; click a name for its full form)`,
    [["time_pct", "Time %"], ["total_us", "Total (µs)"], ["instances", "Instances"], ...STAT_COLS.slice(1),
     ["grid", "Grid", {display: r => dims(r.grid)}],
     ["block", "Block", {display: r => dims(r.block) + (r.launch_configs > 1 ? ` (+${r.launch_configs - 1})` : "")}],
     ["class", "Class"], ["name", "Name", {display: r => r.short_name || r.name, title: fullName}]], S.kernels.by_name));
  gpuRoot.append(sortableTable("stat-memory", "Memory copies and sets",
    [["op", "Operation"], ["count", "Count"], ["bytes", "Bytes"], ["throughput_gbps", "Throughput (GB/s)"], ...STAT_COLS],
    [...Object.entries(S.memcpy), ["Memset", S.memset]].filter(([, v]) => v.count).map(([op, v]) => Object.assign({op}, v))));
  gpuRoot.append(sortableTable("stat-api", API_WORD + " calls",
    [["time_pct", "Time %"], ["total_us", "Total (µs)"], ["calls", "Num Calls"], ...STAT_COLS.slice(1), ["name", "Name"]], S.runtime_api));
  gpuRoot.append(sortableTable("stat-sync", "Synchronization",
    [["kind", "Kind"], ["count", "Count"], ...STAT_COLS],
    [...Object.entries(S.sync.by_kind).map(([kind, v]) => Object.assign({kind}, v)),
     ...S.sync.api.map(r => Object.assign({}, r, {kind: ({sync: "sync call ", copy: "blocking copy "}[r.blocking] || "stream wait ") + r.name, count: r.calls}))]));
  gpuRoot.append(sortableTable("stat-launch", `Launch delay and latency (${S.launch.matched_gpu_ops} linked GPU ops, ${S.launch.orphan_gpu_ops} without a launch call)`,
    [["metric", "Metric"], ["p50", "p50 (µs)"], ["p90", "p90 (µs)"], ["p99", "p99 (µs)"], ["max", "Max (µs)"], ["mean", "Mean (µs)"]],
    [Object.assign({metric: "launch delay (HTA)"}, S.launch.delay_us), Object.assign({metric: "launch latency (Nsight)"}, S.launch.latency_us)]));
  gpuRoot.append(sortableTable("stat-streams", "Stream idle breakdown",
    [["device", "Device"], ["stream", "Stream"], ["ops", "Ops"], ["host_wait_us", "Host wait (µs)"], ["kernel_wait_us", "Kernel wait (µs)"], ["other_us", "Other (µs)"], ["max_queue_depth", "Max queue"]],
    S.streams.map(s => Object.assign({}, s, {device: multi ? `${s.rank}:${s.device}` : String(s.device)}))));
  for (const [key, title] of [["annotations", "User annotations"], ["gpu_annotations", "GPU user annotations"]])
    (key === "gpu_annotations" ? gpuRoot : root).append(sortableTable("stat-" + key, title, [["instances", "Instances"], ...STAT_COLS, ["name", "Name"]], S[key]));
  root.append(sortableTable("stat-steps", `Steps (${S.steps.count})`,
    [["step", "Step"], ["rank", "Rank"], ["duration_us", "Duration (µs)"]], S.steps.items));
}

// ------------------------------------------------------------------ insights
function buildInsights() {
  const root = document.getElementById("insights");
  const list = S.insights || [];
  root.append(el("p", {text: list.length ? `${list.length} findings, most severe first.` : "No rule fired for this profile."}));
  const grid = el("div", {"class": "grid"});
  for (const i of list) {
    grid.append(el("div", {"class": "card insight " + i.severity, "data-rule": i.rule},
      el("div", {"class": "sev", text: `${i.severity} · ${i.rule} · ${i.scope}`}),
      el("h2", {text: i.title}), el("div", {text: i.evidence}),
      el("div", {"class": "rec"}, el("strong", {text: "Recommendation: "}), i.recommendation)));
  }
  root.append(grid);
  root.append(el("h2", {text: "Thresholds"}));
  root.append(sortableTable("thresholds", "Rule thresholds (override with --threshold NAME=VALUE)",
    [["name", "Name"], ["value", "Value"], ["meaning", "Meaning"]],
    DATA.thresholds.map(t => ({name: t.name, value: t.value === undefined ? t.default : t.value, meaning: t.meaning}))));
}
