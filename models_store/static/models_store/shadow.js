// modelhost: the shadow comparison on a shadow version's page (Chart.js from
// npm, as charts.js). Fetches shadow.json?range=hour|day|week (the answer of
// GET /api/models/<m>/shadow/?version=<n>) and fills the table (per output:
// compared, exact matches, max and mean |diff|, argmax agreement) and the
// chart (per step: exact-match share and argmax agreement of each output).
// window.shadowComparison keeps what was fetched.
"use strict";

(function () {
  const box = document.getElementById("shadow");
  if (!box) return;
  const PALETTE = ["#1f5fbf", "#c4312b", "#1a7f37", "#9a6700", "#8250df", "#0a7f8a", "#bf3989", "#57606a"];
  const state = { range: "hour", data: null, chart: null };
  window.shadowComparison = state;

  const share = (value) => (value === null || value === undefined ? "–" : `${(100 * value).toFixed(1)}%`);
  const number = (value) => (value === null || value === undefined ? "–" : Number(value.toPrecision(6)).toString());

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = text;
    return td;
  }

  function fillTable(data) {
    const rows = Object.entries(data.outputs).map(([name, o]) => {
      const tr = document.createElement("tr");
      tr.dataset.output = name;
      tr.append(
        cell(name), cell(String(o.compared)), cell(`${o.exact_matches} (${share(o.exact_match_share)})`),
        cell(number(o.max_abs_diff)), cell(number(o.mean_abs_diff)),
        cell(o.argmax_rows ? `${share(o.argmax_agreement)} of ${o.argmax_rows} rows` : "–"),
      );
      return tr;
    });
    if (!rows.length) {
      const tr = document.createElement("tr");
      const td = cell(`no comparison in the last ${data.range}`);
      td.colSpan = 6;
      td.className = "muted";
      tr.append(td);
      rows.push(tr);
    }
    box.querySelector("#shadow-table tbody").replaceChildren(...rows);
    document.getElementById("shadow-totals").textContent =
      `${data.requests} copies run, ${data.errors} errors, ${data.dropped} dropped (queue full), ${data.busy} not run (busy) in the last ${data.range}`;
  }

  function drawChart(data) {
    const labels = data.times.map((t) => new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" }));
    const datasets = [];
    Object.entries(data.series.outputs).forEach(([name, s], i) => {
      const color = PALETTE[i % PALETTE.length];
      datasets.push({ label: `${name}: exact-match share`, data: s.exact_match_share, borderColor: color, backgroundColor: color, fill: false });
      if (s.argmax_agreement.some((v) => v !== null)) {
        datasets.push({ label: `${name}: argmax agreement`, data: s.argmax_agreement, borderColor: color, backgroundColor: color, borderDash: [4, 3], fill: false });
      }
    });
    if (typeof Chart === "undefined") return; // the library is not installed (make venv installs it)
    if (state.chart) state.chart.destroy();
    state.chart = new Chart(document.getElementById("shadow-chart"), {
      type: "line",
      data: { labels, datasets },
      options: {
        animation: false,
        maintainAspectRatio: false,
        spanGaps: false,
        interaction: { mode: "index", intersect: false },
        elements: { point: { radius: 2, hitRadius: 4 }, line: { borderWidth: 1.5 } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
        scales: { x: { ticks: { maxTicksLimit: 8, autoSkip: true } }, y: { min: 0, max: 1, title: { display: true, text: "share" } } },
      },
    });
  }

  function load(range) {
    state.range = range;
    box.querySelectorAll("[data-range]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.range === range)));
    return fetch(`${box.dataset.url}?range=${encodeURIComponent(range)}`, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`HTTP ${r.status}`))))
      .then((data) => {
        if (data.range !== state.range) return; // a later click won
        state.data = data;
        fillTable(data);
        drawChart(data);
        box.dataset.loadedRange = range;
      })
      .catch((error) => {
        document.getElementById("shadow-totals").textContent = `the comparison could not be loaded (${error.message})`;
      });
  }

  box.querySelectorAll("[data-range]").forEach((b) => b.addEventListener("click", () => load(b.dataset.range)));
  state.load = load;
  load("hour");
})();
