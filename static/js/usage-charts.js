// The Usage page's charts (templates/portal/usage.html): the page embeds its rows as JSON (json_script);
// this draws tokens by key and by model as stacked bars, requests with errors and 429s, and TTFT at the
// gateway, each over the whole chosen range (chart-range.js). Nothing is fetched: changing the filters reloads the page.
(function () {
  "use strict";

  // Each bar covers its hour (or day): from the period's start, one granularity wide.
  function sumBy(data, group, value) {
    const series = new Map();
    data.periods.forEach((period, i) => {
      const name = data[group][i];
      if (!series.has(name)) series.set(name, new Map());
      const points = series.get(name);
      points.set(period, (points.get(period) || 0) + data[value][i]);
    });
    return [...series.entries()].map(([name, points]) => ({
      x: [...points.keys()], y: [...points.values()], name: name, type: "bar",
      width: data.step_ms, offset: 0,
    }));
  }

  function total(data, value, name) {
    const points = new Map();
    data.periods.forEach((period, i) => points.set(period, (points.get(period) || 0) + data[value][i]));
    return { x: [...points.keys()], y: [...points.values()], name: name, mode: "lines+markers" };
  }

  function layout(data, title, extra) {
    return Object.assign({
      title: { text: title, font: { size: 14 } }, margin: { l: 50, r: 10, t: 36, b: 30 },
      legend: { orientation: "h", y: -0.2 }, xaxis: ChartRange.axis(data.start, data.end),
      yaxis: { rangemode: "tozero" },
    }, extra || {});
  }

  function plot(id, data, traces, title, extra) {
    Plotly.react(id, traces, layout(data, title, extra), { displayModeBar: false, responsive: true });
    ChartRange.note(id, ChartRange.points(traces), data.span);
  }

  function start() {
    const node = document.getElementById("usage-data");
    if (!node || typeof Plotly === "undefined" || typeof ChartRange === "undefined" || !document.getElementById("chart-tokens-by-key")) return;
    const data = JSON.parse(node.textContent);
    plot("chart-tokens-by-key", data, sumBy(data, "keys", "tokens"), "Tokens by key", { barmode: "stack" });
    plot("chart-tokens-by-model", data, sumBy(data, "models", "tokens"), "Tokens by model", { barmode: "stack" });
    plot("chart-requests", data, [total(data, "requests", "requests"), total(data, "errors", "errors (5xx)"),
      total(data, "rate_limited", "refused (429)")], "Requests");
    const ttft = data.ttft;
    plot("chart-ttft", data, [
      { x: ttft.map((t) => t.period), y: ttft.map((t) => t.p50), name: "p50", mode: "lines+markers" },
      { x: ttft.map((t) => t.period), y: ttft.map((t) => t.p95), name: "p95", mode: "lines+markers" },
    ], "Time to first token at the gateway (ms)");
  }

  document.addEventListener("DOMContentLoaded", start);
})();
