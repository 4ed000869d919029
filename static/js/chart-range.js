// What every time chart shares (usage-charts.js, service-charts.js, rollout-chart.js, lab-charts.js): its x-axis
// spans the range the person chose (or the rollout's window, or the what-if load), never only the span of the data
// (one hour of data in a 24-hour range is one hour-wide bar at its place in the day, not a bar across the chart),
// and a chart with one point or none says so in words below it.
(function () {
  "use strict";

  // The x-axis of a time chart from `start` to `end` (ISO times), whatever the data covers.
  function axis(start, end) {
    return { type: "date", range: [start, end], autorange: false };
  }

  // The x-axis of a chart of numbers (such as minutes into a load) from `start` to `end`, whatever the data covers.
  function linear(start, end) {
    return { range: [start, end], autorange: false };
  }

  // The sentence under the chart `id`: none when it has two points or more.
  function note(id, count, span) {
    const chart = document.getElementById(id);
    if (!chart) return;
    let node = document.getElementById(`${id}-note`);
    if (!node) {
      // The chart and its sentence share one cell of the page's chart grid.
      const frame = document.createElement("div");
      frame.className = "chart-frame";
      chart.replaceWith(frame);
      frame.appendChild(chart);
      node = document.createElement("p");
      node.id = `${id}-note`;
      node.className = "muted small chart-note";
      frame.appendChild(node);
      chart.setAttribute("aria-describedby", node.id);
    }
    node.textContent = count === 0 ? `No data in ${span}.`
      : count === 1 ? `One point in ${span}: too few to draw a line; the chart still spans ${span}.` : "";
    node.hidden = count > 1;
  }

  // Distinct times among the traces' x values.
  function points(traces) {
    return new Set(traces.flatMap((t) => t.x.filter((_, i) => t.y[i] !== null && t.y[i] !== undefined))).size;
  }

  window.ChartRange = { axis: axis, linear: linear, note: note, points: points };
})();
