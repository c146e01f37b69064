// modelhost: the traffic charts of the version comparison page (Chart.js):
// both versions' requests per step and compute latency p50/p99, from
// compare.json?a=&b=&range=hour|day|week. window.compareCharts keeps what was fetched.
"use strict";

(function () {
  const box = document.getElementById("compare-charts");
  if (!box || typeof Chart === "undefined") return;
  Chart.defaults.animation = false;
  Chart.defaults.font.size = 11;
  const COLORS = { a: "#1f5fbf", b: "#c4312b" };
  const state = { range: "hour", data: null, charts: {} };
  window.compareCharts = state;

  function label(seconds) {
    const d = new Date(seconds * 1000);
    const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
    return state.range === "week" ? `${d.toLocaleDateString([], { weekday: "short" })} ${hm}` : hm;
  }

  function chart(id, datasets, unit) {
    if (state.charts[id]) state.charts[id].destroy();
    state.charts[id] = new Chart(document.getElementById(id), {
      type: "line",
      data: { labels: state.data.traffic.times.map(label), datasets },
      options: {
        maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        elements: { point: { radius: 2, hitRadius: 4 }, line: { borderWidth: 1.5 } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
        scales: { x: { ticks: { maxTicksLimit: 8 } }, y: { beginAtZero: true, title: { display: true, text: unit } } },
      },
    });
  }

  function draw() {
    const t = state.data.traffic;
    const v = { a: box.dataset.a, b: box.dataset.b };
    chart("compare-requests", ["a", "b"].map((s) => ({
      label: `version ${v[s]}`, data: t[s].requests, borderColor: COLORS[s], backgroundColor: COLORS[s], fill: false,
    })), "requests");
    chart("compare-latency", ["a", "b"].flatMap((s) => [
      { label: `version ${v[s]} p50`, data: t[s].compute_p50_ms, borderColor: COLORS[s], backgroundColor: COLORS[s], fill: false },
      { label: `version ${v[s]} p99`, data: t[s].compute_p99_ms, borderColor: COLORS[s], backgroundColor: COLORS[s], borderDash: [4, 3], fill: false },
    ]), "ms");
    document.getElementById("compare-totals").textContent =
      `${t.a.total_requests} requests to version ${v.a} (${t.a.total_errors} errors), ` +
      `${t.b.total_requests} to version ${v.b} (${t.b.total_errors} errors) in the last ${state.range}`;
    box.dataset.loadedRange = state.range;
  }

  function load(range) {
    state.range = range;
    box.querySelectorAll("[data-range]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.range === range)));
    return fetch(`${box.dataset.url}&range=${encodeURIComponent(range)}`, { credentials: "same-origin" })
      .then((r) => r.json().then((body) => (r.ok ? body : Promise.reject(new Error(body.error || `HTTP ${r.status}`)))))
      .then((data) => {
        if (data.traffic.range !== state.range) return; // a later click won
        state.data = data;
        draw();
      })
      .catch((error) => {
        document.getElementById("compare-totals").textContent = `the charts could not be loaded (${error.message})`;
      });
  }

  box.querySelectorAll("[data-range]").forEach((b) => b.addEventListener("click", () => load(b.dataset.range)));
  state.load = load;
  load("hour");
})();
