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
  if (!devices.length) gpu.append(el("div", {"class": "note", text: "No GPU activity in this profile."}));
  grid.append(gpu);

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
  } else util.append(el("div", {"class": "note", text: "No GPU activity."}));
  grid.append(util);

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
  grid.append(top);

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
  grid.append(card("GPU time by activity (summed)", bars([
    {label: "kernels", value: S.kernels.total_us, path: "kernels.total_us", color: PALETTE[0]},
    {label: "memcpy + memset", value: memcpyTotal + S.memset.total_us, path: "memcpy+memset.total_us", color: PALETTE[1]},
    {label: "synchronization (GPU sync events)", value: S.sync.total_us, path: "sync.total_us", color: PALETTE[3]},
    {label: "host blocked in syncs and blocking copies", value: S.sync.host_blocked_us || 0, path: "sync.host_blocked_us", color: PALETTE[6]},
  ], fmtUs, "activity"), bars(Object.entries(S.kernels.by_class).map(([c, v]) => ({label: "kernel class: " + c, value: v, path: "kernels.by_class." + c})), fmtUs, "class")));

  // Kernel precision.
  grid.append(card("Kernel time by precision (from kernel names)",
    bars(Object.entries(DATA.dashboard.precision).map(([p, v], i) => ({label: p, value: v, path: "precision." + p, color: PALETTE[i % PALETTE.length]})), fmtUs, "precision")));

  // Memcpy by kind.
  const mc = Object.entries(S.memcpy).filter(([, m]) => m.count);
  const mcCard = card("Memory copies by kind", bars(mc.map(([kind, m]) => ({label: `${kind} (${fmtNum(m.count)} copies, ${fmtBytes(m.bytes)})`, value: m.total_us, path: `memcpy.${kind}.total_us`})), fmtUs, "memcpy"));
  grid.append(mcCard);

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
  grid.append(card("Kernel launch latency and delay",
    el("div", {"class": "kpis"},
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "latency p50"}), el("div", {"class": "v"}, metric("launch.latency_us.p50", L.latency_us.p50, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "latency p99"}), el("div", {"class": "v"}, metric("launch.latency_us.p99", L.latency_us.p99, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "delay p50"}), el("div", {"class": "v"}, metric("launch.delay_us.p50", L.delay_us.p50, fmtUs))),
      el("div", {"class": "kpi"}, el("div", {"class": "l", text: "linked GPU ops"}), el("div", {"class": "v"}, metric("launch.matched_gpu_ops", L.matched_gpu_ops)))),
    el("div", {"class": "note", text: "Latency: GPU start − launch start (NVIDIA). Delay: GPU start − launch end, ≥ 0 (HTA)."})));
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
  root.append(sortableTable("stat-devices", "GPU temporal breakdown (per device)",
    [["device", "Device"], ["span_us", "Span (µs)"], ["busy_us", "Busy (µs)"], ["idle_pct", "Idle %"], ["compute_pct", "Compute %"], ["non_compute_pct", "Non-compute %"], ["ops", "Ops"]],
    Object.entries(S.devices).map(([device, d]) => Object.assign({device}, d))));
  root.append(sortableTable("stat-kernels", `GPU kernels by name (${S.kernels.by_name.length} names, ${S.kernels.count} launches; click a name for its full form)`,
    [["time_pct", "Time %"], ["total_us", "Total (µs)"], ["instances", "Instances"], ...STAT_COLS.slice(1),
     ["grid", "Grid", {display: r => dims(r.grid)}],
     ["block", "Block", {display: r => dims(r.block) + (r.launch_configs > 1 ? ` (+${r.launch_configs - 1})` : "")}],
     ["class", "Class"], ["name", "Name", {display: r => r.short_name || r.name, title: fullName}]], S.kernels.by_name));
  root.append(sortableTable("stat-memory", "Memory copies and sets",
    [["op", "Operation"], ["count", "Count"], ["bytes", "Bytes"], ["throughput_gbps", "Throughput (GB/s)"], ...STAT_COLS],
    [...Object.entries(S.memcpy), ["Memset", S.memset]].filter(([, v]) => v.count).map(([op, v]) => Object.assign({op}, v))));
  root.append(sortableTable("stat-api", API_WORD + " calls",
    [["time_pct", "Time %"], ["total_us", "Total (µs)"], ["calls", "Num Calls"], ...STAT_COLS.slice(1), ["name", "Name"]], S.runtime_api));
  root.append(sortableTable("stat-sync", "Synchronization",
    [["kind", "Kind"], ["count", "Count"], ...STAT_COLS],
    [...Object.entries(S.sync.by_kind).map(([kind, v]) => Object.assign({kind}, v)),
     ...S.sync.api.map(r => Object.assign({}, r, {kind: ({sync: "sync call ", copy: "blocking copy "}[r.blocking] || "stream wait ") + r.name, count: r.calls}))]));
  root.append(sortableTable("stat-launch", `Launch delay and latency (${S.launch.matched_gpu_ops} linked GPU ops, ${S.launch.orphan_gpu_ops} without a launch call)`,
    [["metric", "Metric"], ["p50", "p50 (µs)"], ["p90", "p90 (µs)"], ["p99", "p99 (µs)"], ["max", "Max (µs)"], ["mean", "Mean (µs)"]],
    [Object.assign({metric: "launch delay (HTA)"}, S.launch.delay_us), Object.assign({metric: "launch latency (Nsight)"}, S.launch.latency_us)]));
  root.append(sortableTable("stat-streams", "Stream idle breakdown",
    [["device", "Device"], ["stream", "Stream"], ["ops", "Ops"], ["host_wait_us", "Host wait (µs)"], ["kernel_wait_us", "Kernel wait (µs)"], ["other_us", "Other (µs)"], ["max_queue_depth", "Max queue"]],
    S.streams.map(s => Object.assign({}, s, {device: multi ? `${s.rank}:${s.device}` : String(s.device)}))));
  for (const [key, title] of [["annotations", "User annotations"], ["gpu_annotations", "GPU user annotations"]])
    root.append(sortableTable("stat-" + key, title, [["instances", "Instances"], ...STAT_COLS, ["name", "Name"]], S[key]));
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

  const view = {t0: 0, t1: tEnd * 1.01, scrollY: 0, selected: -1};
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
      c.fillText(fit(c, more + T.tracks[L.track].label + (hidden > 0 ? ` (+${hidden} levels)` : ""), LABEL_W - 10), 4, y + HEAD / 2);
    }
    drawAxis(c);
    document.getElementById("tl-range").textContent = `${fmtUs((view.t1 - view.t0) / 1e3)} visible · ${fmtNum(n)} events`;
    canvas.setAttribute("data-view", `${view.t0},${view.t1}`);
    canvas.setAttribute("data-drawn", String(drawn));
  }
  function drawAxis(c) {
    c.fillStyle = "#fff"; c.fillRect(0, 0, W, AXIS);
    c.strokeStyle = "#d9dee7"; c.fillStyle = "#667085";
    const span = view.t1 - view.t0, target = span / 8;
    const step = Math.pow(10, Math.floor(Math.log10(target))) * [1, 2, 5, 10].find(m => Math.pow(10, Math.floor(Math.log10(target))) * m >= target);
    for (let t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
      const x = xOf(t);
      c.beginPath(); c.moveTo(x, AXIS - 6); c.lineTo(x, AXIS); c.stroke();
      c.fillText(fmtUs(t / 1e3), x + 2, AXIS / 2);
    }
    c.beginPath(); c.moveTo(0, AXIS); c.lineTo(W, AXIS); c.stroke();
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

// ------------------------------------------------------------------ page
function showTab(name) {
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const s of document.querySelectorAll(".tab")) s.classList.toggle("active", s.id === name);
  if (name === "timeline") {
    if (!Timeline.started) { Timeline.init(); Timeline.started = true; } else Timeline.draw();
    document.getElementById("tl-canvas").focus({preventScroll: true});  // W/A/S/D work at once
  }
}
document.getElementById("subtitle").textContent = `${DATA.title} · generated ${DATA.generated} · ${fmtNum(DATA.timeline.count)} timeline events`;
for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
buildDashboard();
buildStatistics();
buildInsights();
window.otelReport = {Timeline, showTab, data: DATA};
if (location.hash.length > 1) showTab(location.hash.slice(1));
