// The what-if lab's plots (templates/portal/partials/lab_run.html): the run's panel embeds each scenario's
// timeline as JSON (json_script); this draws replicas and TTFT p95 over time per scenario on one time axis, and
// GPU-hours against SLO attainment (the Pareto view). Drawn again when htmx swaps a finished run's panel in.
// The time plots span the whole load (apps/web/portal/lab.py _time_axis), however few points they have, and one
// with one point or none says so (chart-range.js).
(function () {
  "use strict";

  function layout(title, extra) {
    return Object.assign({
      title: { text: title, font: { size: 14 } }, margin: { l: 50, r: 10, t: 36, b: 40 },
      legend: { orientation: "h", y: -0.25 },
    }, extra || {});
  }

  function draw() {
    const node = document.getElementById("lab-data");
    if (!node || typeof Plotly === "undefined" || typeof ChartRange === "undefined"
        || !document.getElementById("chart-lab-replicas")) return;
    const data = JSON.parse(node.textContent);
    const config = { displayModeBar: false, responsive: true };
    const minutes = (s) => s.t.map((t) => t / 60);
    const lone = (s) => (s.t.length > 1 ? "lines" : "markers");  // a lone point draws no line: show its marker
    const time = { title: { text: "minutes into the load" }, ...ChartRange.linear(0, data.span_s / 60) };
    const timePlot = (id, traces, title) => {
      // The legend goes below the axis title, which it would otherwise cover.
      Plotly.react(id, traces, layout(title, {
        xaxis: time, yaxis: { rangemode: "tozero" }, margin: { l: 50, r: 10, t: 36, b: 70 },
        legend: { orientation: "h", y: -0.3, yanchor: "top" },
      }), config);
      ChartRange.note(id, ChartRange.points(traces), data.span);
    };
    timePlot("chart-lab-replicas", data.scenarios.map((s) => ({
      x: minutes(s), y: s.replicas, name: s.name, mode: lone(s), line: { shape: "hv" },
    })), "Replicas");
    timePlot("chart-lab-ttft", data.scenarios.map((s) => ({
      x: minutes(s), y: s.ttft_p95, name: s.name, mode: lone(s), connectgaps: false,
    })), "TTFT p95 (s)");
    Plotly.react("chart-lab-pareto", [{
      x: data.scenarios.map((s) => s.gpu_hours), y: data.scenarios.map((s) => s.slo_attainment * 100),
      text: data.scenarios.map((s) => s.name), mode: "markers+text", textposition: "top center",
      // A search's chosen configuration stands out: the cheapest meeting the SLO.
      marker: { size: data.scenarios.map((s) => (s.name === data.chosen ? 16 : 10)),
                symbol: data.scenarios.map((s) => (s.name === data.chosen ? "star" : "circle")) }, name: "scenarios",
    }], layout("GPU-hours against SLO attainment", {
      showlegend: false, xaxis: { title: { text: "GPU-hours" }, rangemode: "tozero" },
      yaxis: { title: { text: "SLO attainment (%)" } },
    }), config);
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSwap", (event) => {
    if (event.target && event.target.id === "lab-run") draw();
  });
})();
