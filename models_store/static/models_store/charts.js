// modelhost: the charts of the model page and the models list's sparklines
// (Chart.js from npm, see docs/charts.md). The model page fetches
// charts.json?range=hour|day|week; the list's data is in #sparkline-data.
// window.modelCharts keeps what was fetched and the Chart objects.
"use strict";

(function () {
  if (typeof Chart === "undefined") return; // the library is not installed (make venv installs it)
  Chart.defaults.animation = false;
  Chart.defaults.font.size = 11;
  const PALETTE = ["#1f5fbf", "#c4312b", "#1a7f37", "#9a6700", "#8250df", "#0a7f8a", "#bf3989", "#57606a"];

  // -- models list: one sparkline per model ------------------------------------
  const sparkData = document.getElementById("sparkline-data");
  if (sparkData) {
    const lines = JSON.parse(sparkData.textContent);
    document.querySelectorAll("canvas[data-sparkline]").forEach((canvas) => {
      const values = lines[canvas.dataset.sparkline] || [];
      canvas.title = `${values.reduce((a, b) => a + b, 0)} requests in the last hour`;
      new Chart(canvas, {
        type: "line",
        data: { labels: values.map((_, i) => i), datasets: [{ data: values, borderColor: PALETTE[0], borderWidth: 1.5, pointRadius: 0, fill: false }] },
        options: {
          responsive: false,
          plugins: { legend: { display: false }, tooltip: { enabled: false } },
          scales: { x: { display: false }, y: { display: false, beginAtZero: true } },
        },
      });
    });
  }

  // -- model page ----------------------------------------------------------------
  const box = document.getElementById("charts");
  if (!box) return;
  const state = { range: "hour", series: "all", data: null, charts: {} };
  window.modelCharts = state;

  function label(seconds, range) {
    const d = new Date(seconds * 1000);
    const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
    return range === "week" ? `${d.toLocaleDateString([], { weekday: "short" })} ${hm}` : hm;
  }

  function lineChart(id, datasets, labels, yTitle) {
    const old = state.charts[id];
    if (old) old.destroy();
    state.charts[id] = new Chart(document.getElementById(id), {
      type: "line",
      data: { labels, datasets },
      options: {
        maintainAspectRatio: false,
        spanGaps: false,
        interaction: { mode: "index", intersect: false },
        elements: { point: { radius: 2, hitRadius: 4 }, line: { borderWidth: 1.5 } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
        scales: { x: { ticks: { maxTicksLimit: 8, autoSkip: true } }, y: { beginAtZero: true, title: { display: !!yTitle, text: yTitle } } },
      },
    });
  }

  function perSeries(key) {
    return state.data.series
      .filter((s) => s.name !== "all")
      .map((s, i) => ({ label: s.name, data: s[key], borderColor: PALETTE[i % PALETTE.length], backgroundColor: PALETTE[i % PALETTE.length], fill: false }));
  }

  function selected() {
    return state.data.series.find((s) => s.name === state.series) || state.data.series[state.data.series.length - 1];
  }

  function drawSelected() {
    const labels = state.data.times.map((t) => label(t, state.range));
    const s = selected();
    const latency = [];
    ["queue", "compute"].forEach((kind, k) => {
      [50, 95, 99].forEach((q, j) => {
        latency.push({
          label: `${kind} p${q}`, data: s[`${kind}_p${q}_ms`], borderColor: PALETTE[k * 3 + j], backgroundColor: PALETTE[k * 3 + j],
          borderDash: kind === "queue" ? [4, 3] : [], fill: false,
        });
      });
    });
    lineChart("chart-latency", latency, labels, "ms");
    lineChart("chart-batches", [{ label: `${s.name}: mean batch size`, data: s.mean_batch_size, borderColor: PALETTE[4], backgroundColor: PALETTE[4], fill: false }], labels, "rows");
  }

  function draw() {
    const data = state.data;
    const labels = data.times.map((t) => label(t, state.range));
    lineChart("chart-requests", perSeries("requests_per_second"), labels, "requests/s");
    lineChart("chart-errors", perSeries("errors_per_second"), labels, "errors/s");
    const select = document.getElementById("chart-series");
    const keep = state.series;
    select.replaceChildren(...data.series.map((s) => new Option(s.name === "all" ? "all versions and transports" : s.name, s.name)));
    state.series = data.series.some((s) => s.name === keep) ? keep : "all";
    select.value = state.series;
    drawSelected();
    const all = data.series[data.series.length - 1];
    document.getElementById("chart-totals").textContent =
      `${all.total_requests} requests, ${all.total_errors} errors in the last ${state.range} (steps of ${data.step_seconds / 60} min)`;
    box.dataset.loadedRange = state.range;
  }

  function load(range) {
    state.range = range;
    box.querySelectorAll("[data-range]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.range === range)));
    return fetch(`${box.dataset.url}?range=${encodeURIComponent(range)}`, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`charts: HTTP ${r.status}`))))
      .then((data) => {
        if (data.range !== state.range) return; // a later click won
        state.data = data;
        draw();
      })
      .catch((error) => {
        document.getElementById("chart-totals").textContent = `the charts could not be loaded (${error.message})`;
      });
  }

  box.querySelectorAll("[data-range]").forEach((b) => b.addEventListener("click", () => load(b.dataset.range)));
  document.getElementById("chart-series").addEventListener("change", (e) => {
    state.series = e.target.value;
    drawSelected();
  });
  state.load = load;
  load("hour");
})();
