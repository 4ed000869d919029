// Live charts of one service (templates/portal/service_detail.html): fetch the series JSON every few
// seconds and redraw with Plotly.react, so the page never reloads. Plotly is loaded when the charts' tab is
// first shown (plotly-on-demand.js); the figures in words are kept current on every tab. The range and pool
// selectors change the query; the server picks raw rows or one-minute rollups and the step. Each chart spans
// the chosen range (chart-range.js), however few points it has.
(function () {
  "use strict";

  const CHARTS = [
    { id: "chart-ttft", title: "Time to first token (ms)", ms: true,
      traces: [["ttft_p50", "p50"], ["ttft_p95", "p95"], ["ttft_p99", "p99"]] },
    { id: "chart-itl", title: "Inter-token latency (ms)", ms: true, traces: [["itl_p50", "p50"], ["itl_p95", "p95"]] },
    // The KV cache panel (#kv-cache): both tiers' usage and hit rates, and what the CPU tier loads back.
    { id: "chart-kv", title: "KV cache: usage and hits (%)", pct: true,
      traces: [["kv_usage", "GPU tier used"], ["cpu_usage", "CPU tier used"], ["prefix_hit_rate", "GPU hits"],
               ["cpu_hit_rate", "CPU tier hits"]] },
    { id: "chart-kv-loads", title: "Loaded back from the CPU tier (tokens/s)", traces: [["cpu_load_tps", "tokens/s"]] },
    { id: "chart-queue", title: "Requests", traces: [["running", "running"], ["waiting", "waiting"]] },
    { id: "chart-tokens", title: "Tokens per second", traces: [["prompt_tps", "prompt"], ["gen_tps", "generated"]] },
    { id: "chart-replicas", title: "Ready replicas", shape: "hv", traces: [["ready_replicas", "ready"]] },
  ];

  function scale(values, chart) {
    const factor = chart.ms ? 1000 : chart.pct ? 100 : 1;
    return values.map((v) => (v === null ? null : v * factor));
  }

  // Scaling decisions from the Scaling panel (templates/web/partials/scaling_panel.html), drawn as
  // markers at the replica count each decision asked for; htmx swaps the panel, so it is read on every draw.
  function decisionTrace(since) {
    const node = document.getElementById("scaling-markers");
    if (!node) return null;
    const marks = JSON.parse(node.textContent).filter((m) => !since || Date.parse(m.time) >= Date.parse(since));
    if (!marks.length) return null;
    const colour = { scaled: "#2457c5", blocked: "#c53030" };
    return {
      x: marks.map((m) => m.time), y: marks.map((m) => m.replicas), text: marks.map((m) => m.text),
      name: "decisions", mode: "markers", hoverinfo: "text+x",
      marker: { size: 10, symbol: "diamond", color: marks.map((m) => colour[m.action] || "#b7791f") },
    };
  }

  // The load forecast of each pool in replicas, from the Scaling panel too: the replicas the forecast asked
  // for a cold start ahead (dashed), inside the band its latest error spans (shaded), drawn at the time the
  // forecast load was due, so the band runs ahead of the ready replicas.
  function forecastTraces(since) {
    const node = document.getElementById("scaling-forecast");
    if (!node) return [];
    const traces = [];
    for (const pool of JSON.parse(node.textContent)) {
      const pts = pool.points.filter((p) => !since || Date.parse(p.time) >= Date.parse(since));
      if (!pts.length) continue;
      const x = pts.map((p) => p.time);
      const label = `forecast (${pool.pool})`;
      traces.push(
        { x: x, y: pts.map((p) => p.high), name: `${label} band`, mode: "lines", hoverinfo: "y+x",
          line: { width: 0, shape: "hv" }, showlegend: false },
        { x: x, y: pts.map((p) => p.low), name: `${label} band`, mode: "lines", hoverinfo: "y+x",
          line: { width: 0, shape: "hv" }, fill: "tonexty", fillcolor: "rgba(183, 121, 31, 0.18)" },
        { x: x, y: pts.map((p) => p.replicas), name: label, mode: "lines", hoverinfo: "text+x",
          text: pts.map((p) => `${p.replicas} replicas forecast (${p.low}–${p.high})` +
                               (p.trusted ? "" : ", ignored: off by more than its bound")),
          line: { width: 1.5, dash: "dash", shape: "hv", color: "#b7791f" } });
    }
    return traces;
  }

  // A value with no value beside it draws no line; such points get a visible marker, so a chart never
  // looks empty while it holds a figure (a serverless service woken for a moment, a first scrape).
  function isolated(values) {
    return values.map((v, i) => v !== null && (i === 0 || values[i - 1] === null) &&
                                (i === values.length - 1 || values[i + 1] === null));
  }

  function draw(data, span) {
    for (const chart of CHARTS) {
      const traces = chart.traces.map(([column, name]) => {
        const y = scale(data[column] || [], chart);
        return {
          x: data.time, y: y, name: name, mode: "lines+markers",
          line: { shape: chart.shape || "linear", width: 2 }, connectgaps: false,
          marker: { size: isolated(y).map((alone) => (alone ? 7 : 0)) },
        };
      });
      if (chart.id === "chart-replicas") {
        const since = data.time.length ? data.time[0] : null;
        traces.push(...forecastTraces(since));
        const decisions = decisionTrace(since);
        if (decisions) traces.push(decisions);
      }
      const layout = {
        title: { text: chart.title, font: { size: 14 } }, margin: { l: 50, r: 10, t: 36, b: 30 },
        legend: { orientation: "h", y: -0.2 }, xaxis: ChartRange.axis(data.since, data.until),
        yaxis: { rangemode: "tozero" },
        // A zoom survives the refreshes of one range; choosing another range shows all of it.
        uirevision: `${chart.id} ${span}`,
      };
      Plotly.react(chart.id, traces, layout, { displayModeBar: false, responsive: true });
      ChartRange.note(chart.id, ChartRange.points(traces.slice(0, chart.traces.length)), span);
    }
  }

  // The figures in words, on every tab (the Overview's among them), with or without the charts.
  function words(data) {
    // Worded by the server from the same series (apps/web/services.py now_figure): never a figure the
    // chart does not show.
    const now = ((data.now || {}).ttft_p95 || {}).text || "no data";
    document.getElementById("ttft-p95-now").textContent = now;
    for (const node of document.querySelectorAll("[data-now=ttft_p95]")) node.textContent = now;  // the Overview's
    document.getElementById("series-note").textContent =
      `${data.time.length} points, ${data.resolution} rows every ${data.step} s`;
  }

  function start() {
    const root = document.getElementById("charts");
    if (!root || typeof ChartRange === "undefined" || typeof PlotlyOnDemand === "undefined") return;
    const rangeSelect = document.getElementById("range");
    const roleSelect = document.getElementById("role");
    let timer = null;
    let inFlight = false;
    let latest = null;  // the last series read and its range, drawn when Plotly arrives
    let plotly = false;

    function show(data, span) {
      latest = [data, span];
      words(data);
      if (plotly) draw(data, span);
    }

    // The charts' tab (Traffic) loads Plotly the first time it is shown, and draws what was read so far; if the
    // script cannot be fetched, the next tab shown tries again.
    function arm() {
      PlotlyOnDemand.whenShown(root).then(() => {
        plotly = true;
        if (latest) draw(...latest);
      }, () => document.addEventListener("tab-shown", arm, { once: true }));
    }
    arm();

    async function refresh() {
      if (inFlight) return;
      inFlight = true;
      const params = new URLSearchParams({ range: rangeSelect.value });
      if (roleSelect && roleSelect.value) params.set("role", roleSelect.value);
      try {
        const response = await fetch(`${root.dataset.seriesUrl}?${params}`, { credentials: "same-origin" });
        if (response.ok) show(await response.json(), `the last ${rangeSelect.value}`);
      } finally {
        inFlight = false;
      }
    }

    function restart() {
      clearInterval(timer);
      refresh();
      timer = setInterval(refresh, Number(root.dataset.refreshMs) || 5000);
    }

    rangeSelect.addEventListener("change", restart);
    if (roleSelect) roleSelect.addEventListener("change", restart);
    restart();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
