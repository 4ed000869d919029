// Both revisions' TTFT p95 over a canary rollout, one line each, on the service page's Rollout panel
// (templates/portal/partials/rollout.html). The data comes with the panel's live part (#rollout-chart-data,
// apps/web/rollout_panel.py rollout_chart), which htmx refreshes every 5 s; each refresh redraws with Plotly.react
// in the style of the service's other charts (service-charts.js). The x-axis spans the rollout's own window, from
// its start to its end (or now), as the line under it says (#rollout-chart-span), and a chart with one point or none says so (chart-range.js).
(function () {
  "use strict";

  const COLOURS = { stable: "#2457c5", canary: "#c05621" };

  function draw() {
    const node = document.getElementById("rollout-chart-data");
    const target = document.getElementById("chart-rollout-ttft");
    if (!node || !target || typeof Plotly === "undefined" || typeof ChartRange === "undefined") return;
    const data = JSON.parse(node.textContent);
    if (!data) return;
    const traces = data.sides.map((side) => {
      const role = side.name.includes("(canary)") ? "canary" : "stable";
      return {
        x: side.time, y: side.ttft_p95_ms, name: side.name, mode: "lines+markers", connectgaps: false,
        line: { width: 2, color: COLOURS[role], dash: role === "canary" ? "dot" : "solid" },
        marker: { size: 4, color: COLOURS[role] },
      };
    });
    const layout = {
      title: { text: "TTFT p95 during the rollout (ms)", font: { size: 14 } }, margin: { l: 50, r: 10, t: 36, b: 30 },
      legend: { orientation: "h", y: -0.2 }, xaxis: ChartRange.axis(data.start, data.end),
      yaxis: { rangemode: "tozero" }, uirevision: "rollout-ttft",
    };
    Plotly.react(target, traces, layout, { displayModeBar: false, responsive: true });
    ChartRange.note(target.id, ChartRange.points(traces), data.span);
  }

  // Plotly is on the rollout page already; on the service page it is loaded when the Changes tab is first shown
  // (plotly-on-demand.js), and each refresh after that redraws at once.
  let asked = false;

  function start() {
    const target = document.getElementById("chart-rollout-ttft");
    if (!target) return;
    if (typeof Plotly !== "undefined") {
      draw();
    } else if (!asked && typeof PlotlyOnDemand !== "undefined") {
      asked = true;
      PlotlyOnDemand.whenShown(target).then(draw, () => { asked = false; });  // the next refresh asks again
    }
  }

  document.addEventListener("DOMContentLoaded", start);
  document.addEventListener("htmx:afterSettle", start);
})();
