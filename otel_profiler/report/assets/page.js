// otel-profiler HTML report: the page itself (tabs, first render); inlined last, after report.js,
// timeline.js and flame.js.
"use strict";

// ------------------------------------------------------------------ page
function showTab(name) {
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const s of document.querySelectorAll(".tab")) s.classList.toggle("active", s.id === name);
  if (name === "timeline") {
    if (!Timeline.started) { Timeline.init(); Timeline.started = true; } else Timeline.draw();
    document.getElementById("tl-canvas").focus({preventScroll: true});  // W/A/S/D work at once
  }
  if (name === "flame") {
    if (!Flame.started) { Flame.started = true; Flame.init(); } else Flame.draw();
  }
}
document.getElementById("subtitle").textContent = `${DATA.title} · generated ${DATA.generated} · ${fmtNum(DATA.timeline.count)} timeline events`;
for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
buildDashboard();
buildStatistics();
buildOperators();
buildMemory();
buildRoofline();
buildInsights();
window.otelReport = {Timeline, Flame, showTab, data: DATA};
if (location.hash.length > 1) showTab(location.hash.slice(1));
