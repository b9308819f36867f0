// otel-profiler HTML report: the Operators tab (operators by the GPU time of the kernels they
// launched; click an operator for its top kernels and call stacks), the kernels of CUDA graphs and
// compiled regions, and the nn.Module hierarchy when the trace recorded it.
"use strict";

function kernelTable(kernels) {
  const t = el("table", {}, el("thead", {}, el("tr", {}, ...["Kernel", "Count", "GPU time"].map(h => el("th", {text: h})))));
  const body = el("tbody");
  for (const k of kernels)
    body.append(el("tr", {}, el("td", {"class": "name", title: fullName(k), text: k.name}),
      el("td", {"class": "num", "data-value": String(k.count), text: fmtNum(k.count)}),
      el("td", {"class": "num", "data-value": String(k.gpu_us), text: fmtUs(k.gpu_us)})));
  t.append(body);
  return t;
}

function buildOperators() {
  const root = document.getElementById("operators");
  const O = S.operators;
  if (!O || !O.by_name.length) {
    root.append(el("p", {"class": "note missing", id: "no-operators", text: "No PyTorch operators in this profile (no cpu_op or record_function events)."}));
    return;
  }
  const lost = O.unattributed, gpu = O.kernel_total_us > 0 || Object.keys(S.devices).length > 0;
  root.append(el("p", {"class": "note", id: "operators-note", text: gpu ?
    `${fmtUs(O.attributed_us)} of ${fmtUs(O.kernel_total_us)} kernel time attributed to the innermost operator that launched it` +
    ` (${O.attributed_by.external_id} kernels by external id, ${O.attributed_by.enclosing_operator} by the enclosing operator);` +
    ` ${lost.no_launch.kernels} kernels have no launch call in the trace, ${lost.no_operator.kernels} no operator. Click an operator for its kernels.` :
    "No GPU work in this profile: the GPU columns are left out."}));
  const details = el("div", {"class": "card", id: "op-details"}, el("em", {text: "Click an operator for the kernels it launched."}));
  const cpuCols = [["calls", "Calls"], ["self_cpu_us", "Self CPU (µs)"], ["total_cpu_us", "Total CPU (µs)"]];
  const columns = gpu ? [["gpu_pct", "GPU %"], ["self_gpu_us", "Self GPU (µs)"], ["total_gpu_us", "Total GPU (µs)"],
                         ...cpuCols, ["kernels", "Kernels"], ["name", "Name"]] : [...cpuCols, ["name", "Name"]];
  // torch's own ranges (steps, Optimizer.step#..., enumerate(DataLoader)#..., compiled regions) are not operators
  const ops = O.by_name.filter(r => !r.range), ranges = O.by_name.filter(r => r.range);
  const table = sortableTable("stat-operators", `Operators (${ops.length} names)`, columns, ops);
  const rangeTable = sortableTable("stat-torch-ranges", `torch's own ranges (${ranges.length} names; recorded by torch, not by your code)`,
    [["range", "Marks"], ...columns], ranges);
  const byName = new Map(O.by_name.map(r => [r.name, r]));
  for (const t of [table, rangeTable]) t.addEventListener("click", e => {
    const tr = e.target.closest("tbody tr");
    if (!tr) return;
    const r = byName.get(tr.lastElementChild.dataset.value);
    if (!r) return;
    for (const row of root.querySelectorAll("tbody tr.selected")) row.classList.remove("selected");
    tr.classList.add("selected");
    details.replaceChildren(el("h2", {text: r.name}),
      el("div", {"class": "note", text: `${fmtNum(r.calls)} calls · self GPU ${fmtUs(r.self_gpu_us)} · total GPU (with the operators it calls) ${fmtUs(r.total_gpu_us)} · self CPU ${fmtUs(r.self_cpu_us)}`}),
      r.top_kernels.length ? kernelTable(r.top_kernels) : el("p", {text: "It launched no kernel itself."}),
      ...(r.call_stacks || []).map(c => el("div", {"class": "call-stack"},
        el("h3", {text: `Call stack (${fmtNum(c.calls)} calls)`}), el("pre", {text: c.stack.join("\n")}))));
  });
  root.append(table, ...(ranges.length ? [rangeTable] : []), details);
  if (O.regions.length) {
    const regions = el("div", {"class": "card stat-card", id: "op-regions"}, el("h2", {text: "Kernels of CUDA graphs and compiled regions"}));
    for (const g of O.regions)
      regions.append(el("h3", {text: `${g.name} (${g.kind === "cuda_graph" ? "CUDA graph" : "compiled region"}): ${fmtNum(g.kernels)} kernels, ${fmtUs(g.gpu_us)}`}),
        kernelTable(g.top_kernels));
    root.append(regions);
  }
  const M = O.modules;
  if (M && M.by_path && M.by_path.length) {
    root.append(el("p", {"class": "note", id: "module-note", text:
      `nn.Module hierarchy: ${fmtUs(M.attributed_us)} of ${fmtUs(M.kernel_total_us)} kernel time launched inside a module` +
      ` (${fmtNum(M.outside.kernels)} kernels outside any module: backward pass, optimizer, no launch call). Hover a module for its path.`}));
    const modules = sortableTable("stat-modules", `nn.Module hierarchy (${M.by_path.length} modules, ${fmtNum(M.calls)} calls)`,
      [["total_gpu_us", "Total GPU (µs)"], ["self_gpu_us", "Self GPU (µs)"], ["calls", "Calls"], ["cpu_us", "CPU (µs)"],
       ["kernels", "Kernels"], ["path", "Module", {display: r => "\u00a0\u00a0".repeat(r.depth) + r.name, title: r => r.path}]], M.by_path);
    const byPath = new Map(M.by_path.map(r => [r.path, r]));
    const moduleDetails = el("div", {"class": "card", id: "module-details"}, el("em", {text: "Click a module for the kernels it launched itself."}));
    modules.addEventListener("click", e => {
      const tr = e.target.closest("tbody tr");
      const r = tr && byPath.get(tr.lastElementChild.dataset.value);
      if (!r) return;
      moduleDetails.replaceChildren(el("h2", {text: r.path}),
        el("div", {"class": "note", text: `${fmtNum(r.calls)} calls · self GPU ${fmtUs(r.self_gpu_us)} · total GPU (with its sub-modules) ${fmtUs(r.total_gpu_us)} · CPU ${fmtUs(r.cpu_us)}`}),
        r.top_kernels.length ? kernelTable(r.top_kernels) : el("p", {text: "It launched no kernel itself."}));
    });
    root.append(modules, moduleDetails);
  }
}
