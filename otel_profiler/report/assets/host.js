// otel-profiler HTML report: the dashboard's CPU utilization over time (the samples a live run keeps
// in its profile folder) and the compute resources card (hosts, CPUs, memory, GPUs, versions).
"use strict";

function cpuChart(c) {
  const w = 420, h = 150, pad = 28;
  const root = svg("svg", {viewBox: `0 0 ${w} ${h + 20}`, width: "100%", id: "cpu-chart"});
  const n = c.t_s.length, tMax = Math.max(1e-9, c.t_s[n - 1]);
  const x = t => pad + (w - pad) * t / tMax, y = v => h - (h - 10) * Math.min(v, 100) / 100;
  for (const g of [0, 50, 100]) {
    root.append(svg("line", {x1: pad, x2: w, y1: y(g), y2: y(g), stroke: "#d9dee7"}));
    const t = svg("text", {x: 2, y: y(g) + 3}); t.textContent = g + "%"; root.append(t);
  }
  const line = (values, color, cls) => {
    const d = values.map((v, i) => `${i ? "L" : "M"} ${x(c.t_s[i]).toFixed(1)} ${y(v).toFixed(1)}`).join(" ");
    root.append(svg("path", {d, fill: "none", stroke: color, "stroke-width": 1.4, "class": cls}));
  };
  line(c.system_pct, "#e8a13a", "system");
  line(c.process_pct, "#2f6fde", "process");
  const t = svg("text", {x: w, y: h + 14, "text-anchor": "end"}); t.textContent = fmtNum(c.t_s[n - 1], 1) + " s"; root.append(t);
  return root;
}

function cpuUtilCard() {
  const c = card("CPU utilization over time");
  c.id = "cpu-util";
  const data = DATA.dashboard.cpu_timeline || {}, ranks = Object.keys(data);
  if (!ranks.length) {
    c.append(el("div", {"class": "note", id: "no-cpu-samples", text: "No CPU samples: recorded by live runs (OTEL_PROFILER_CPU_SAMPLE_S), not by trace files."}));
    return c;
  }
  const sel = el("select", {id: "cpu-rank"});
  for (const r of ranks) sel.append(el("option", {value: r, text: "rank " + r}));
  const holder = el("div"), note = el("div", {"class": "note"});
  const draw = () => {
    const d = data[sel.value];
    holder.replaceChildren(cpuChart(d));
    const mean = a => a.reduce((s, v) => s + v, 0) / a.length;
    note.textContent = `${d.t_s.length} samples every ${fmtNum(d.interval_s, 1)} s; machine mean ${fmtNum(mean(d.system_pct), 1)}%, ` +
      `training process mean ${fmtNum(mean(d.process_pct), 1)}% of its ${d.cores} cores.`;
  };
  sel.addEventListener("change", draw);
  c.append(sel, holder, el("div", {"class": "legend"},
    el("span", {}, el("i", {style: "background:#e8a13a"}), "machine (all cores)"),
    el("span", {}, el("i", {style: "background:#2f6fde"}), "training process (its cores)")), note);
  draw();
  return c;
}

function computeCard() {
  const c = card("Compute resources");
  c.id = "compute";
  const hosts = S.compute || [];
  if (!hosts.length) { c.append(el("div", {"class": "note", text: "Nothing known about the machines."})); return c; }
  for (const h of hosts) {
    const rows = [];
    const add = (k, v) => { if (v != null && v !== "") rows.push(el("tr", {}, el("th", {text: k}), el("td", {"class": "name", text: String(v)}))); };
    add("Host", `${h.host || "unknown"} (rank${h.ranks.length > 1 ? "s" : ""} ${h.ranks.join(", ")})`);
    add("Instance type", h.instance_type && h.instance_type.value);
    add("CPU", h.cpu_model);
    if (h.cpu_cores) add("CPU cores", `${h.cpu_cores.logical} logical` + (h.cpu_cores.physical ? `, ${h.cpu_cores.physical} physical` : ""));
    add("Memory", h.memory_bytes != null ? fmtBytes(h.memory_bytes) : null);
    (h.gpus || []).forEach(g => add(`GPU ${g.index}`, [g.name, g.memory_bytes != null ? fmtBytes(g.memory_bytes) : null, g.uuid].filter(x => x).join(" · ")));
    add("Driver", h.driver || (h.driver_cuda ? `CUDA ${h.driver_cuda} capable` : null));
    add("Versions", Object.entries(h.versions || {}).map(([k, v]) => `${k} ${v}`).join(", "));
    add("OS", h.os);
    c.append(el("table", {"class": "compute-host"}, el("tbody", {}, ...rows)));
  }
  c.append(el("div", {"class": "note", text: hosts[0].source === "live" ? "Read by the profiled process." : "From the trace file's metadata."}));
  return c;
}
