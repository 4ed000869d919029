// The Usage page's charts (templates/portal/usage.html): the page embeds its rows as JSON (json_script);
// this draws tokens by key and by model as stacked bars, requests with errors and 429s, and TTFT at the
// gateway. Nothing is fetched: changing the filters reloads the page.
(function () {
  "use strict";

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
    }));
  }

  function total(data, value, name) {
    const points = new Map();
    data.periods.forEach((period, i) => points.set(period, (points.get(period) || 0) + data[value][i]));
    return { x: [...points.keys()], y: [...points.values()], name: name, mode: "lines+markers" };
  }

  function layout(title, extra) {
    return Object.assign({
      title: { text: title, font: { size: 14 } }, margin: { l: 50, r: 10, t: 36, b: 30 },
      legend: { orientation: "h", y: -0.2 }, xaxis: { type: "date" }, yaxis: { rangemode: "tozero" },
    }, extra || {});
  }

  function start() {
    const node = document.getElementById("usage-data");
    if (!node || typeof Plotly === "undefined" || !document.getElementById("chart-tokens-by-key")) return;
    const data = JSON.parse(node.textContent);
    const config = { displayModeBar: false, responsive: true };
    Plotly.react("chart-tokens-by-key", sumBy(data, "keys", "tokens"), layout("Tokens by key", { barmode: "stack" }), config);
    Plotly.react("chart-tokens-by-model", sumBy(data, "models", "tokens"), layout("Tokens by model", { barmode: "stack" }), config);
    Plotly.react("chart-requests", [total(data, "requests", "requests"), total(data, "errors", "errors (5xx)"),
      total(data, "rate_limited", "refused (429)")], layout("Requests"), config);
    const ttft = data.ttft;
    Plotly.react("chart-ttft", [
      { x: ttft.map((t) => t.period), y: ttft.map((t) => t.p50), name: "p50", mode: "lines+markers" },
      { x: ttft.map((t) => t.period), y: ttft.map((t) => t.p95), name: "p95", mode: "lines+markers" },
    ], layout("Time to first token at the gateway (ms)"), config);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
